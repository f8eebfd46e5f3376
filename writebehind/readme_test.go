package writebehind_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADME_Examples keeps the code blocks of the README's write-behind
// section identical to the examples they come from, so the code users copy
// compiles and runs. A block sits between "<!-- readme:<name>:begin" and
// "<!-- readme:<name>:end" in the README and may end with the example's
// output as "// Output" comments; the example marks its code with
// "// readme:<name>:begin" and "// readme:<name>:end", possibly in several
// regions, which are joined in order. Indentation and blank lines are
// ignored.
func TestREADME_Examples(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatalf("read the README: %v", err)
	}
	for _, tc := range []struct{ name, example string }{
		{name: "writebehind-hash", example: "example_hash_test.go"},
		{name: "writebehind-deadletters", example: "example_deadletter_test.go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(tc.example)
			if err != nil {
				t.Fatal(err)
			}
			example := regions(t, tc.example, string(src), "// readme:"+tc.name+":begin", "// readme:"+tc.name+":end")
			block := regions(t, "README.md", string(readme), "<!-- readme:"+tc.name+":begin", "<!-- readme:"+tc.name+":end")
			block = block[strings.Index(block, "\n")+1:] // the rest of the begin line
			block = strings.TrimSpace(block)
			if !strings.HasPrefix(block, "```go\n") || !strings.HasSuffix(block, "\n```") {
				t.Fatalf("README block %s is not one ```go code block:\n%s", tc.name, block)
			}
			block = strings.TrimSuffix(strings.TrimPrefix(block, "```go\n"), "\n```")
			if i := strings.Index(block, "\n// Output"); i >= 0 {
				block = block[:i]
			}
			if got, want := normalize(block), normalize(example); got != want {
				t.Errorf("README block %s differs from the marked code of %s.\nREADME:\n%s\n\nexample:\n%s", tc.name, tc.example, got, want)
			}
		})
	}
}

// regions returns the text between each begin and the next end marker in s,
// joined by newlines. It fails the test when there is none or a marker is
// unpaired.
func regions(t *testing.T, file, s, begin, end string) string {
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
