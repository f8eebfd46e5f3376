package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/bench"
)

func newBenchCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure streamq next to raw go-redis baselines (the former streamq-bench)",
		Long: `Run the benchmark of docs/performance.md: each scenario against a raw go-redis
baseline doing the same Redis work. Its flags are its own, single-dash
('streamq bench -h' lists them); -addr defaults to the host:port of REDIS_URL or
REDIS_ADDR when one is set. Output and -json are as in docs/performance.md.`,
		Example: `  streamq bench -scenarios enqueue,batch -runs 1
  streamq bench -scenarios e2e -concurrency 64 -json results.json`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.ContainsFunc(args, func(s string) bool {
				return s == "-addr" || s == "--addr" || strings.HasPrefix(s, "-addr=") || strings.HasPrefix(s, "--addr=")
			}) {
				if addr := a.envAddr(); addr != "" {
					args = append([]string{"-addr", addr}, args...)
				}
			}
			if code := bench.Main(args, a.stdout, a.stderr, []string{"bench"}); code != 0 {
				return &exitError{code: code, err: fmt.Errorf("bench failed (exit code %d)", code)}
			}
			return nil
		},
	}
}

// envAddr is the host:port of REDIS_URL or REDIS_ADDR, or "".
func (a *app) envAddr() string {
	if u := a.env(envURL); u != "" {
		if o, err := redis.ParseURL(u); err == nil && o.Network != "unix" {
			return o.Addr
		}
		return ""
	}
	return a.env(envAddr)
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the streamq version",
		Long: `Print the version of streamq this binary was built from, and the Go version.

JSON: {"version","go"}`,
		Example: `  streamq version`,
		Args:    noArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if a.json {
				return printJSON(a.stdout, struct {
					Version string `json:"version"`
					Go      string `json:"go"`
				}{streamq.Version, runtime.Version()})
			}
			fmt.Fprintf(a.stdout, "streamq %s (%s)\n", streamq.Version, runtime.Version())
			return nil
		},
	}
}
