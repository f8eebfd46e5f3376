package main

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/streamq/streamq/inspect"
)

// driver feeds a dash model messages and runs the commands it returns (the
// Redis calls) at once, as the Bubble Tea runtime would, without a
// terminal.
type driver struct {
	t *testing.T
	m *dashModel
}

// run runs cmd and feeds what it returns back into the model.
func (d *driver) run(cmd tea.Cmd) {
	d.t.Helper()
	for range 100 {
		if cmd == nil {
			return
		}
		msg := cmd()
		switch msg := msg.(type) {
		case nil:
			return
		case tea.BatchMsg:
			for _, c := range msg {
				d.run(c)
			}
			return
		case tea.QuitMsg:
			return
		}
		_, cmd = d.m.Update(msg)
	}
	d.t.Fatal("the commands did not settle in 100 steps")
}

// key presses keys, one after the other.
func (d *driver) key(keys ...string) {
	d.t.Helper()
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "tab":
			msg = tea.KeyMsg{Type: tea.KeyTab}
		case "down":
			msg = tea.KeyMsg{Type: tea.KeyDown}
		case "up":
			msg = tea.KeyMsg{Type: tea.KeyUp}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		_, cmd := d.m.Update(msg)
		d.run(cmd)
	}
}

// sees fails unless the view shows every one of want.
func (d *driver) sees(what string, want ...string) string {
	d.t.Helper()
	v := d.m.View()
	for _, w := range want {
		if !strings.Contains(v, w) {
			d.t.Errorf("%s: the view lacks %q:\n%s", what, w, v)
		}
	}
	return v
}

// TestDash drives the terminal view with key presses against a real Redis:
// the queues, a queue's jobs by state, one job, pause and resume, requeue
// of a dead letter, run now and delete (after y) of a delayed job, and help.
func TestDash(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	in, err := inspect.New(f.rdb, &inspect.Options{Prefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, m: newDashModel(in, f.prefix, 5*time.Second, 0)}
	d.run(d.m.Init())
	d.m.Update(tea.WindowSizeMsg{Width: 160, Height: 50})
	d.sees("queues", "QUEUE", "cache", "orders", "reports", "priority", "stream+writebehind")

	// cache, orders, reports: the second is orders.
	d.key("down", "enter")
	d.sees("orders, waiting", "orders", "waiting 2", "running 1", "dead 1", f.waiting[0], `{"order":4}`)
	d.key("tab")
	d.sees("orders, running", f.running, "for ")

	// Pause and resume the open queue.
	paused := f.keys("orders").Paused
	d.key("p")
	if f.rdb.Exists(ctx, paused).Val() != 1 {
		t.Fatalf("after p the queue is not paused:\n%s", d.m.View())
	}
	d.sees("paused", "paused orders", "paused, 1 consumers")
	d.key("p")
	if f.rdb.Exists(ctx, paused).Val() != 0 {
		t.Fatalf("after p again the queue is still paused:\n%s", d.m.View())
	}

	// The dead letter: open it, requeue it with r.
	d.key("tab", "tab", "tab")
	d.sees("orders, dead", f.dead, "no such customer")
	d.key("enter")
	d.sees("dead letter", "Job", f.dead, "State:", "dead (permanent)", `{"order":2,"do":"die"}`)
	d.key("r")
	d.sees("requeued", "requeued job "+f.dead)
	if n := f.rdb.XLen(ctx, f.keys("orders").Dead).Val(); n != 0 {
		t.Errorf("after r, %d dead letters, want 0", n)
	}

	// The delayed job: d asks, n keeps it, d and y delete it.
	d.key("esc", "tab", "tab", "tab", "tab", "tab") // dead -> cancelled -> completed -> waiting -> running -> delayed
	d.sees("orders, delayed", "[delayed 1]", f.delayed)
	d.key("d")
	d.sees("delete asks", "delete delayed job "+f.delayed+" of orders? (y/n)")
	d.key("n")
	if _, err := inQueue(t, in, "orders").Job(ctx, f.delayed); err != nil {
		t.Fatalf("after d and n the delayed job is gone: %v", err)
	}
	d.key("d", "y")
	d.sees("deleted", "deleted job "+f.delayed, "no delayed jobs")
	// The retrying job, run now with r.
	d.key("tab")
	d.sees("orders, retrying", f.retrying, "card declined")
	d.key("r")
	d.sees("run now", "job "+f.retrying+" is due now")
	if j, err := inQueue(t, in, "orders").Job(ctx, f.retrying); err != nil || j.State == inspect.StateRetrying {
		t.Errorf("after r the retrying job is %+v, %v", j, err)
	}
	// c and y cancel the running job.
	d.key("tab", "tab", "tab", "tab", "tab") // retrying -> dead -> cancelled -> completed -> waiting -> running
	d.key("c", "y")
	d.sees("cancel", "cancel requested for job "+f.running)

	// Back to the queues; ? shows every key; q quits.
	d.key("esc")
	d.sees("back", "QUEUE", "orders")
	d.sees("short help", "enter open", "p pause/resume", "? all keys")
	d.key("?")
	d.sees("full help", "c cancel running job", "refresh", "shift+tab/← previous state")
	if _, cmd := d.m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")}); cmd == nil {
		t.Error("q returned no command")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("q does not quit")
	}
}

func inQueue(t *testing.T, in *inspect.Inspector, name string) *inspect.Queue {
	t.Helper()
	q, err := in.Queue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestDash_NeedsTerminal refuses to start without one.
func TestDash_NeedsTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.run("", "dash"); r.code != exitUsage || !strings.Contains(r.stderr, "terminal") {
		t.Errorf("dash without a terminal: exit code %d, stderr %q", r.code, r.stderr)
	}
}
