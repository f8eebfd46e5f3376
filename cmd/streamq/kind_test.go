package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/streamq/streamq"
)

// TestCLI_KindAndTags lists jobs by kind and tag, shows the KIND column and
// the kind and tags of one job, and keeps the filters on the next page.
func TestCLI_KindAndTags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q, err := streamq.NewQueue(e.rdb, "mail", &streamq.QueueConfig{KeyPrefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range []struct {
		payload string
		opts    []streamq.EnqueueOption
	}{
		{"welcome-1", []streamq.EnqueueOption{streamq.WithKind("email.welcome"), streamq.Tags("tenant:1")}},
		{"welcome-2", []streamq.EnqueueOption{streamq.WithKind("email.welcome"), streamq.Tags("tenant:2")}},
		{"welcome-3", []streamq.EnqueueOption{streamq.WithKind("email.welcome"), streamq.Tags("tenant:1", "vip")}},
		{"resize", []streamq.EnqueueOption{streamq.WithKind("image.resize"), streamq.Tags("tenant:1")}},
	} {
		id, err := p.Enqueue(ctx, []byte(j.payload), j.opts...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var page struct {
		Jobs []struct {
			Payload struct {
				Text string `json:"text"`
			} `json:"payload"`
			Kind string   `json:"kind"`
			Tags []string `json:"tags"`
		} `json:"jobs"`
	}
	out := e.ok("jobs", "mail", "--kind", "email.welcome", "--tag", "tenant:1", "--json")
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(page.Jobs) != 2 || page.Jobs[0].Kind != "email.welcome" || strings.Join(page.Jobs[1].Tags, ",") != "tenant:1,vip" {
		t.Errorf("jobs --kind --tag:\n%s", out)
	}
	out = e.ok("jobs", "mail", "--tag", "tenant:1", "--limit", "1")
	for _, want := range []string{"KIND", "email.welcome", "--tag tenant:1 --cursor"} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs --tag table lacks %q:\n%s", want, out)
		}
	}
	id := strings.TrimSpace(e.ok("enqueue", "mail", "--kind", "cli.kind", "--tag", "from:cli", "x"))
	if out := e.ok("jobs", "mail", "--kind", "cli.kind", "--tag", "from:cli"); !strings.Contains(out, id) {
		t.Errorf("a job enqueued with --kind and --tag is not listed by them:\n%s", out)
	}
	if r := e.run("", "enqueue", "mail", "--kind", "bad kind", "x"); r.code != exitUsage || !strings.Contains(r.stderr, "WithKind") {
		t.Errorf("enqueue --kind 'bad kind': exit code %d, stderr %s", r.code, r.stderr)
	}
	out = e.ok("job", "mail", ids[2])
	for _, want := range []string{"Kind:        email.welcome", "Tags:        tenant:1, vip"} {
		if !strings.Contains(out, want) {
			t.Errorf("job lacks %q:\n%s", want, out)
		}
	}
}
