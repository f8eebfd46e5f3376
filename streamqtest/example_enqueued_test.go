package streamqtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
)

// signUp is the code under test: it enqueues a welcome mail now and a
// reminder in a day, at most once per user.
func signUp(ctx context.Context, p *streamq.Producer, email string) error {
	if _, err := p.Enqueue(ctx, []byte(email), streamq.WithHeader("kind", "welcome")); err != nil {
		return err
	}
	_, err := p.Enqueue(ctx, []byte(email), streamq.WithHeader("kind", "reminder"),
		streamq.ProcessIn(24*time.Hour), streamq.Unique("reminder:"+email, 48*time.Hour))
	return err
}

// testSignUp is a test of signUp: a queue of the test's own on the test
// binary's Redis, then assertions on what signUp enqueued.
func testSignUp(t testing.TB) {
	// readme:testing-enqueued:begin
	ctx := t.Context()
	q := streamqtest.NewQueue(t, "emails", nil)
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := signUp(ctx, p, "ada@example.com"); err != nil {
		t.Fatal(err)
	}

	jobs := streamqtest.RequireEnqueued(ctx, t, q,
		streamqtest.Want{Payload: []byte("ada@example.com"), Headers: map[string]string{"kind": "welcome"}},
		streamqtest.Want{
			Headers: map[string]string{"kind": "reminder"},
			Key:     "reminder:ada@example.com",
			DueAt:   time.Now().Add(24 * time.Hour), DueWithin: time.Minute,
		},
	)
	streamqtest.RequireEnqueuedN(ctx, t, q, 2) // and nothing else
	// readme:testing-enqueued:end
	for _, j := range jobs {
		fmt.Printf("%s %s scheduled=%v\n", j.Headers["kind"], j.Payload, j.Scheduled)
	}
}

// ExampleRequireEnqueued runs testSignUp, which in a _test.go file is
// func TestSignUp(t *testing.T), with the package's TestMain calling
// streamqtest.Main.
func ExampleRequireEnqueued() {
	t := newExampleT() // in a test: the *testing.T
	defer t.finish()
	testSignUp(t)
	// Output:
	// welcome ada@example.com scheduled=false
	// reminder ada@example.com scheduled=true
}
