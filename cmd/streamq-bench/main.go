// Command streamq-bench measures streamq against hand-written go-redis loops
// that do the same Redis work with nothing else around them (the baseline).
// It is the same program as `streamq bench` (package internal/bench), kept
// under this name so that existing commands and docs keep working:
//
//	go run ./cmd/streamq-bench                       # every scenario, median of 3
//	go run ./cmd/streamq-bench -scenarios e2e -concurrency 64 -cpuprofile cpu.out
//	go run ./cmd/streamq-bench -memcheck             # consumer RSS after 100k and 1M jobs
package main

import (
	"os"

	"github.com/streamq/streamq/internal/bench"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr, nil))
}
