package testworker

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestPrograms vets the helper programs: they live in testdata, which the
// ./... patterns of go vet and go build skip, so without this test a broken
// helper would show only when a crash test builds it.
func TestPrograms(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to vet the helper programs: %v (put it in PATH)", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "vet", StreamqWorker, PriorityWorker, WritebehindWorker, WorkflowWorker)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the helper programs: %v\n%s", err, out)
	}
}
