package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runBullMQ runs bullmq/bench.mjs with node against a fresh private
// redis-server for enqueue and process, and another for concurrent. Without
// node, or without the script's node_modules, it reports the peer skipped
// and why.
func runBullMQ(ctx context.Context, o *options) ([]result, error) {
	if why := bullmqMissing(o); why != "" {
		var rs []result
		for _, ph := range []string{phaseEnqueue, phaseProcess, phaseConcurrent} {
			rs = append(rs, result{peer: "bullmq", phase: ph, skipped: why})
		}
		return rs, nil
	}
	var rs []result
	for _, phases := range [][]string{{phaseEnqueue, phaseProcess}, {phaseConcurrent}} {
		got, err := runBullMQScript(ctx, o, phases)
		if err != nil {
			return nil, err
		}
		rs = append(rs, got...)
	}
	return rs, nil
}

// bullmqMissing says why BullMQ cannot run, or "" when it can.
func bullmqMissing(o *options) string {
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not on PATH"
	}
	if _, err := os.Stat(filepath.Join(o.bullmqDir, "node_modules", "bullmq")); err != nil {
		return fmt.Sprintf("no node_modules/bullmq in %s: run npm install there", o.bullmqDir)
	}
	return ""
}

// runBullMQScript runs the script for phases on a fresh redis-server and
// reads one result per phase from its output.
func runBullMQScript(ctx context.Context, o *options, phases []string) ([]result, error) {
	srv, err := startRedis(ctx, o)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	_, port, _ := strings.Cut(srv.addr, ":")
	limit := time.Duration(len(phases)) * o.timeout
	cctx, cancel := context.WithTimeout(ctx, limit+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", "bench.mjs",
		"--port", port, "--jobs", strconv.Itoa(o.jobs), "--concurrency", strconv.Itoa(o.concurrency),
		"--payload", strconv.Itoa(o.payload), "--batch", strconv.Itoa(o.batch),
		"--phases", strings.Join(phases, ","), "--timeout-ms", strconv.FormatInt(limit.Milliseconds(), 10))
	cmd.Dir = o.bullmqDir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("node bench.mjs %s: %w", strings.Join(phases, ","), err)
	}
	var rs []result
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var line struct {
			Phase   string  `json:"phase"`
			Seconds float64 `json:"seconds"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("node bench.mjs printed %q: %w", sc.Text(), err)
		}
		rs = append(rs, result{peer: "bullmq", phase: line.Phase, jobs: o.jobs,
			d: time.Duration(line.Seconds * float64(time.Second))})
	}
	if len(rs) != len(phases) {
		return nil, fmt.Errorf("node bench.mjs reported %d phases of %d: %q", len(rs), len(phases), out)
	}
	return rs, nil
}
