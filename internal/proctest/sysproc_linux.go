//go:build linux

package proctest

import "syscall"

// sysProcAttr asks Linux to SIGKILL the helper when the test binary dies (a
// -timeout panic, a SIGKILL), so that no helper outlives its tests even when
// cleanups never run. The kernel sends the signal when the OS thread that
// started the child exits; the Go runtime keeps its threads alive unless a
// goroutine that locked its thread exits without unlocking it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
