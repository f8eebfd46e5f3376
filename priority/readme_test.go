package priority_test

import (
	"testing"

	"github.com/streamq/streamq/internal/readmetest"
)

// TestREADME_Example keeps the priority example of docs/priority.md identical to the
// body of Example in example_test.go.
func TestREADME_Example(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "../docs/priority.md", "example_test.go", "priority")
}
