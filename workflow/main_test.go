package workflow_test

import (
	"os"
	"testing"

	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

// TestMain gives the package's tests a Redis; redistest.Run also fails the
// run if goroutines outlive the tests.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m, rediscontainer.Start)) }
