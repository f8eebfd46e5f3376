//go:build !unix

package middleware_test

import "time"

// cpuTime is not measured on this platform; the benchmarks then report a
// CPU overhead of zero.
func cpuTime() time.Duration { return 0 }
