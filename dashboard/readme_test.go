package dashboard_test

import (
	"testing"

	"github.com/streamq/streamq/internal/readmetest"
)

// TestREADME_Dashboard keeps the README's dashboard code identical to the
// marked code of Example.
func TestREADME_Dashboard(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "../README.md", "example_test.go", "dashboard")
}
