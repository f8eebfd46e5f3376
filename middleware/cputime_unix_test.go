//go:build unix

package middleware_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) used by this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
