package streamq_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADME_QuickStart keeps the README's quick start identical to the body
// of Example, so the code users copy is code that compiles and runs.
func TestREADME_QuickStart(t *testing.T) {
	t.Parallel()
	example := region(t, "example_test.go", "// quickstart:begin", "// quickstart:end")
	readme := region(t, "README.md", "<!-- quickstart:begin", "<!-- quickstart:end")
	readme = strings.TrimPrefix(strings.TrimSpace(readme[strings.Index(readme, "\n")+1:]), "```go")
	readme = strings.TrimSuffix(strings.TrimSpace(readme), "```")
	if got, want := normalize(readme), normalize(example); got != want {
		t.Errorf("README quick start differs from Example in example_test.go.\nREADME:\n%s\nExample:\n%s", got, want)
	}
}

func region(t *testing.T, file, begin, end string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q region", file, begin, end)
	}
	return s[i+len(begin) : j]
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
