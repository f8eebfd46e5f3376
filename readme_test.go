package streamq_test

import (
	"testing"

	"github.com/streamq/streamq/internal/readmetest"
)

// TestREADME_QuickStart keeps the README's quick start identical to the body
// of Example, so the code users copy is code that compiles and runs.
func TestREADME_QuickStart(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "README.md", "example_test.go", "quickstart")
}

// TestREADME_Testing keeps the README's "Testing your handlers" code
// identical to the streamqtest examples it comes from.
func TestREADME_Testing(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "README.md", "streamqtest/example_worker_test.go", "testing-worker")
	readmetest.Check(t, "README.md", "streamqtest/example_enqueued_test.go", "testing-enqueued")
}
