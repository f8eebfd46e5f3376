package priority_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamq/streamq/internal/redistest"
)

// TestMain gives the package's tests a Redis (see redistest) and fails the
// run if goroutines outlive the tests.
func TestMain(m *testing.M) {
	code := redistest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}
