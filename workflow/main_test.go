package workflow_test

import (
	"os"
	"testing"

	"github.com/streamq/streamq/internal/keyaudit"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

// TestMain gives the package's tests a Redis; redistest.RunAround also
// fails the run if goroutines outlive the tests, or if a script without a
// slot probe touched a key it does not declare (package keyaudit: the
// workflow scripts run in these tests alone).
func TestMain(m *testing.M) {
	os.Exit(redistest.RunAround(m, keyaudit.Around(rdb.Scripts()), rediscontainer.Start))
}
