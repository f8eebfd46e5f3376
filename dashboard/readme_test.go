package dashboard_test

import (
	"testing"

	"github.com/streamq/streamq/internal/readmetest"
)

// TestREADME_Dashboard keeps the dashboard code of docs/dashboard.md identical to the
// marked code of Example.
func TestREADME_Dashboard(t *testing.T) {
	t.Parallel()
	readmetest.Check(t, "../docs/dashboard.md", "example_test.go", "dashboard")
}
