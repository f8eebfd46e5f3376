// Command peers runs the same jobs through streamq and through other job
// queues, one after the other in one process run, and prints their rates side
// by side: asynq (Redis), River (PostgreSQL) and BullMQ (Redis, Node; when
// node and the script's node_modules are there).
//
// Every peer gets the same no-op handler, payload size, number of jobs and
// concurrency, and, for the Redis peers, a fresh private redis-server with the
// same settings for every phase (started on a free loopback port and stopped
// by this program). River runs in a schema of its own in the PostgreSQL
// database given by -postgres, dropped at the end.
//
// For each peer three phases are timed:
//
//   - enqueue: N jobs inserted with the peer's bulk call, in batches of
//     -batch (asynq has no bulk call: -concurrency goroutines insert one job
//     per call);
//   - process: workers started on the N waiting jobs, until the handler has
//     returned for all of them;
//   - concurrent: workers started on an empty queue while N jobs are
//     inserted as in enqueue, until the handler has returned for all of them.
//
// See README.md for how to run it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// phases, in the order they are run and printed.
const (
	phaseEnqueue    = "enqueue"
	phaseProcess    = "process"
	phaseConcurrent = "concurrent"
)

// options are the command's flags.
type options struct {
	jobs        int
	concurrency int
	payload     int
	batch       int
	peers       []string
	postgres    string
	redisServer string
	bullmqDir   string
	timeout     time.Duration
}

// result is one timed phase of one peer.
type result struct {
	peer, phase string
	jobs        int
	d           time.Duration
	skipped     string // why the peer did not run, if it did not
}

// peer runs the phases of one job queue.
type peer struct {
	name string
	// run times the phases, each bounded by o.timeout, and returns one
	// result per phase.
	run func(ctx context.Context, o *options) ([]result, error)
}

func peersByName() []peer {
	return []peer{
		timed("streamq", onRedis(openStreamq)),
		timed("asynq", onRedis(openAsynq)),
		timed("river", openRiver),
		{"bullmq", runBullMQ},
	}
}

// timed is the peer name whose phases are timed here on the backends open
// makes.
func timed(name string, open opener) peer {
	return peer{name, func(ctx context.Context, o *options) ([]result, error) {
		return phases(ctx, o, name, open)
	}}
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintf(stdout, "peers: %d jobs, concurrency %d, payload %d B, batches of %d\n",
		o.jobs, o.concurrency, o.payload, o.batch)
	var all []result
	for _, p := range peersByName() {
		if !contains(o.peers, p.name) {
			continue
		}
		fmt.Fprintf(stderr, "running %s\n", p.name)
		rs, err := p.run(ctx, o)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		all = append(all, rs...)
	}
	printTable(stdout, all)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	var peers string
	fs.IntVar(&o.jobs, "jobs", 100_000, "jobs per phase")
	fs.IntVar(&o.concurrency, "concurrency", 16, "handler goroutines (or BullMQ worker concurrency) of every peer")
	fs.IntVar(&o.payload, "payload", 100, "payload bytes per job")
	fs.IntVar(&o.batch, "batch", 1000, "jobs per bulk insert")
	fs.StringVar(&peers, "peers", "streamq,asynq,river,bullmq", "comma-separated peers to run")
	fs.StringVar(&o.postgres, "postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL for River (it gets a schema of its own, dropped at the end)")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary: every Redis phase gets a fresh private server on a free loopback port")
	fs.StringVar(&o.bullmqDir, "bullmq-dir", "bullmq", "directory of the BullMQ script, with its node_modules (npm install)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on one phase of one peer")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: flags only", fs.Args())
	}
	var errs []error
	if o.jobs < 1 {
		errs = append(errs, fmt.Errorf("-jobs %d: give at least 1", o.jobs))
	}
	if o.concurrency < 1 {
		errs = append(errs, fmt.Errorf("-concurrency %d: give at least 1", o.concurrency))
	}
	if o.payload < 0 {
		errs = append(errs, fmt.Errorf("-payload %d: give 0 or more bytes", o.payload))
	}
	if o.batch < 1 {
		errs = append(errs, fmt.Errorf("-batch %d: give at least 1", o.batch))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout %s: give a positive duration", o.timeout))
	}
	known := peersByName()
	for p := range strings.SplitSeq(peers, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !knownPeer(known, p) {
			errs = append(errs, fmt.Errorf("-peers: unknown peer %q: use streamq, asynq, river or bullmq", p))
			continue
		}
		o.peers = append(o.peers, p)
	}
	if len(o.peers) == 0 {
		errs = append(errs, errors.New("-peers is empty: name at least one of streamq, asynq, river, bullmq"))
	}
	return o, errors.Join(errs...)
}

func knownPeer(ps []peer, name string) bool {
	for _, p := range ps {
		if p.name == name {
			return true
		}
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// printTable prints one line per peer and phase, with the rate relative to
// streamq's in the same phase ("streamq ÷ peer": how many times streamq's
// rate the peer's is below).
func printTable(w io.Writer, rs []result) {
	base := map[string]float64{}
	for _, r := range rs {
		if r.peer == "streamq" && r.skipped == "" {
			base[r.phase] = rate(r)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peer\tphase\tjobs\tseconds\tjobs/s\tstreamq ÷ peer\t")
	for _, r := range rs {
		if r.skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\tskipped: %s\t\n", r.peer, r.phase, r.skipped)
			continue
		}
		ratio := "-"
		if b, ok := base[r.phase]; ok && rate(r) > 0 {
			ratio = fmt.Sprintf("%.2f×", b/rate(r))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.0f\t%s\t\n", r.peer, r.phase, r.jobs, r.d.Seconds(), rate(r), ratio)
	}
	_ = tw.Flush()
}

func rate(r result) float64 {
	if r.d <= 0 {
		return 0
	}
	return float64(r.jobs) / r.d.Seconds()
}

// payload returns n bytes of printable text (every peer can carry it as a
// string as well as bytes).
func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// batches calls f with the bounds [lo, hi) of consecutive batches of at most
// size items out of n, stopping at the first error.
func batches(n, size int, f func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += size {
		if err := f(lo, min(lo+size, n)); err != nil {
			return err
		}
	}
	return nil
}
