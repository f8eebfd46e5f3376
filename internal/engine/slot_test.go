package engine

import (
	"testing"
	"unsafe"

	"github.com/streamq/streamq/internal/pool"
)

// TestSlot_Size guards the allocation the engine makes per job: a pool.Job
// holding the slot of a front's state of SlotMessageBytes (the root's
// Message; see TestMessage_Size there) fits the 416-byte size class of the
// Go allocator. The typed-jobs batch had grown it to 576, which showed as
// GC time per job at concurrency 64 (docs/performance.md).
func TestSlot_Size(t *testing.T) {
	t.Parallel()
	const sizeClass = 416
	if got := unsafe.Sizeof(pool.Job[slot[[SlotMessageBytes]byte]]{}); got > sizeClass {
		t.Fatalf("a job's slot is %d bytes, more than the %d-byte size class: keep rare per-job state out of slot and Delivery", got, sizeClass)
	}
}
