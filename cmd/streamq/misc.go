package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/bench"
	"github.com/streamq/streamq/internal/redact"
)

func newBenchCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure streamq next to raw go-redis baselines (the former streamq-bench)",
		Long: `Run the benchmark of docs/performance.md: each scenario against a raw go-redis
baseline doing the same Redis work. Its flags are its own, single-dash
('streamq bench -h' lists them), besides two of streamq's:
  --url redis://host:port   the Redis to measure (or REDIS_URL, REDIS_ADDR; bench's
                            own -addr host:port works too). The benchmark connects
                            without credentials or TLS, to database 0: point it at
                            a Redis kept for measuring.
  --json                    print the results as one JSON document on stdout (the
                            table goes to stderr); --json FILE (or -json FILE)
                            writes them to FILE as before.
Output is as in docs/performance.md.`,
		Example: `  streamq bench -scenarios enqueue,batch -runs 1
  streamq bench --url redis://10.0.0.7:6379 -scenarios e2e -concurrency 64 --json > results.json`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			args, toStdout, err := a.benchArgs(args)
			if err != nil {
				return err
			}
			stdout := a.stdout
			var file string
			if toStdout {
				dir, err := os.MkdirTemp("", "streamq-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				file = filepath.Join(dir, "results.json")
				args = append(args, "-json", file)
				stdout = a.stderr
			}
			if code := bench.Main(args, stdout, a.stderr, []string{"bench"}); code != 0 {
				return &exitError{code: code, err: fmt.Errorf("bench failed (exit code %d)", code)}
			}
			if toStdout {
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				_, err = a.stdout.Write(b)
				return err
			}
			return nil
		},
	}
}

// benchArgs takes streamq's own flags out of the arguments of bench (which
// cobra does not parse): --url becomes bench's -addr (from REDIS_URL or
// REDIS_ADDR without one), and a bare --json asks for the results on stdout.
// Other streamq flags are refused, since the benchmark would not use them.
func (a *app) benchArgs(args []string) (out []string, jsonStdout bool, err error) {
	rawURL, addrSet := "", false
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || args[i] == "-" || args[i] == "--" {
			out = append(out, args[i])
			continue
		}
		next := func() (string, bool) {
			if hasVal {
				return val, true
			}
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
				return args[i], true
			}
			return "", false
		}
		switch name {
		case "url":
			v, ok := next()
			if !ok {
				return nil, false, usagef("--url needs a value: --url redis://host:port")
			}
			rawURL = v
		case "json":
			if v, ok := next(); ok {
				out = append(out, "-json", v)
			} else {
				jsonStdout = true
			}
		case "addr":
			addrSet = true
			out = append(out, args[i])
		case "cluster", "sentinel", "user", "password", "tls", "prefix", "group", "timeout":
			return nil, false, usagef("bench does not use --%s: it measures one Redis at --url redis://host:port (or -addr host:port), with queues of its own", name)
		default:
			out = append(out, args[i])
		}
	}
	if addrSet && rawURL != "" {
		return nil, false, usagef("use --url or -addr, not both")
	}
	if addrSet {
		return out, jsonStdout, nil
	}
	source := "--url"
	switch {
	case rawURL != "":
	case a.env(envURL) != "":
		rawURL, source = a.env(envURL), envURL
	case a.env(envAddr) != "":
		return append([]string{"-addr", a.env(envAddr)}, out...), jsonStdout, nil
	default:
		return out, jsonStdout, nil // bench's default, 127.0.0.1:6379
	}
	o, err := redact.ParseURL(rawURL)
	switch {
	case err != nil:
		return nil, false, usagef("%s %v: use redis://host:port", source, err)
	case o.Network == "unix" || o.TLSConfig != nil || o.Username != "" || o.Password != "" || o.DB != 0:
		return nil, false, usagef("%s %s: bench connects to host:port without credentials or TLS, to database 0: use redis://host:port for a Redis kept for measuring", source, redact.URL(rawURL))
	}
	return append([]string{"-addr", o.Addr}, out...), jsonStdout, nil
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
