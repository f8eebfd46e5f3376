// Package readmetest keeps the code blocks of the README identical to the
// runnable examples they come from, so that the code users copy compiles
// and runs.
//
// A README block sits between "<!-- readme:<name>:begin" and
// "<!-- readme:<name>:end" and is one ```go code block, which may end with
// the example's output as "// Output" comments. The example marks its code
// with "// readme:<name>:begin" and "// readme:<name>:end", possibly in
// several regions, which are joined in order. Indentation and blank lines
// are ignored.
package readmetest

import (
	"os"
	"strings"
	"testing"
)

// Check fails t unless the README block name in readme equals the marked
// code of the example file.
func Check(t testing.TB, readme, example, name string) {
	t.Helper()
	code := regions(t, example, read(t, example), "// readme:"+name+":begin", "// readme:"+name+":end")
	block := regions(t, readme, read(t, readme), "<!-- readme:"+name+":begin", "<!-- readme:"+name+":end")
	block = strings.TrimSpace(block[strings.Index(block, "\n")+1:]) // the rest of the begin line
	if !strings.HasPrefix(block, "```go\n") || !strings.HasSuffix(block, "\n```") {
		t.Fatalf("%s: block %s is not one ```go code block:\n%s", readme, name, block)
	}
	block = strings.TrimSuffix(strings.TrimPrefix(block, "```go\n"), "\n```")
	if i := strings.Index(block, "\n// Output"); i >= 0 {
		block = block[:i]
	}
	if got, want := normalize(block), normalize(code); got != want {
		t.Errorf("%s: block %s differs from the marked code of %s.\nREADME:\n%s\n\nexample:\n%s", readme, name, example, got, want)
	}
}

func read(t testing.TB, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// regions returns the text between each begin and the next end marker in s,
// joined by newlines. It fails the test when there is none or a marker is
// unpaired.
func regions(t testing.TB, file, s, begin, end string) string {
	t.Helper()
	var out []string
	for range 100 { // bounded: a file has a few regions
		i := strings.Index(s, begin)
		if i < 0 {
			break
		}
		s = s[i+len(begin):]
		j := strings.Index(s, end)
		if j < 0 {
			t.Fatalf("%s: %q without %q", file, begin, end)
		}
		out = append(out, s[:j])
		s = s[j+len(end):]
	}
	if len(out) == 0 {
		t.Fatalf("%s has no %q ... %q region", file, begin, end)
	}
	if strings.Contains(s, end) {
		t.Fatalf("%s: %q without %q", file, end, begin)
	}
	return strings.Join(out, "\n")
}

// normalize drops indentation and blank lines.
func normalize(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
