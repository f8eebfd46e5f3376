package writebehind_test

import (
	"testing"

	"github.com/streamq/streamq/internal/readmetest"
)

// TestREADME_Examples keeps the code blocks of docs/writebehind.md
// identical to the examples they come from.
func TestREADME_Examples(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "../docs/writebehind.md", "example_hash_test.go", "writebehind-hash")
	readmetest.Check(t, "../docs/writebehind.md", "example_deadletter_test.go", "writebehind-deadletters")
	readmetest.Check(t, "../docs/writebehind.md", "example_version_test.go", "writebehind-counter")
}
