package streamq_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/streamq/streamq/internal/readmetest"
)

// TestREADME_QuickStart keeps the README's quick start identical to the body
// of Example, so the code users copy is code that compiles and runs.
func TestREADME_QuickStart(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "README.md", "example_test.go", "quickstart")
}

// TestREADME_Jobs keeps the typed-jobs guide's code identical to
// ExampleRegister.
func TestREADME_Jobs(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "docs/jobs.md", "example_typed_test.go", "typed")
}

// TestREADME_Testing keeps the code of docs/testing.md identical to the
// streamqtest examples it comes from.
func TestREADME_Testing(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "docs/testing.md", "streamqtest/example_worker_test.go", "testing-worker")
	readmetest.Check(t, "docs/testing.md", "streamqtest/example_enqueued_test.go", "testing-enqueued")
}

// TestREADME_FrontPage keeps the README a front page (the rest of the
// documentation lives in docs/) and checks that every relative link of the
// README and of docs/*.md points to a file that exists, and every #anchor
// to a heading of its file.
func TestREADME_FrontPage(t *testing.T) {
	t.Parallel()
	const maxREADME = 15 << 10
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxREADME {
		t.Errorf("README.md is %d bytes: keep it a front page of at most %d bytes and move details to docs/", len(b), maxREADME)
	}
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := f
			if path != "" {
				file = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !hasAnchor(t, file, anchor) {
				t.Errorf("%s: link %q: no heading with anchor #%s in %s", f, target, anchor, file)
			}
		}
	}
}

// hasAnchor reports whether a heading of the Markdown file has the GitHub
// anchor anchor (lower case, punctuation dropped, spaces as dashes).
func hasAnchor(t *testing.T, file, anchor string) bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var a strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				a.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		if a.String() == anchor {
			return true
		}
	}
	return false
}
