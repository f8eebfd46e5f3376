package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// noArgs refuses positional arguments with a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %q: this command takes none (flags only)", args)
	}
	return nil
}

// exactArgs wants n arguments, named in the error.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return rangeArgs(n, n, names)
}

// rangeArgs wants min to max arguments (max -1: no upper bound).
func rangeArgs(min, max int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || max >= 0 && len(args) > max {
			return usagef("%s: wants %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

// keyValues parses repeated k=v flags.
func keyValues(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--%s %q: use key=value", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// errNeedYes is the error of a destructive action refused without --yes.
var errNeedYes = errors.New("needs --yes")

// confirm asks the person at the terminal to confirm what, or refuses when
// stdin is not a terminal and yes is false.
func (a *app) confirm(what string, yes bool) error {
	if yes {
		return nil
	}
	if !a.stdinTTY {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s %w: stdin is not a terminal, so streamq cannot ask; pass --yes to confirm", what, errNeedYes)}
	}
	fmt.Fprintf(a.stderr, "%s? [y/N] ", what)
	line, err := bufio.NewReader(io.LimitReader(a.stdin, 1024)).ReadString('\n')
	if err != nil && line == "" {
		return &exitError{code: exitFailure, err: fmt.Errorf("%s: not confirmed (%v)", what, err)}
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("%s: not confirmed, nothing done", what)}
}

// progress draws a progress bar on stderr when it is a terminal, and nothing
// otherwise. done is called from the bulk action's progress callback.
type progress struct {
	w     io.Writer
	on    bool
	label string
	total int
}

func (a *app) progress(label string, total int) *progress {
	return &progress{w: a.stderr, on: a.stderrTTY, label: label, total: total}
}

// done shows that n of total are done (n alone when the total is not
// known, 0).
func (p *progress) done(n int) {
	if !p.on {
		return
	}
	if p.total <= 0 {
		fmt.Fprintf(p.w, "\r%s %d", p.label, n)
		return
	}
	const width = 30
	f := min(float64(n)/float64(p.total), 1)
	fill := int(f * width)
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d", p.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), n, p.total)
}

// end finishes the bar's line.
func (p *progress) end() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}
