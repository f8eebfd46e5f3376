package streamqtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
)

// chargeCard is the handler under test: an invalid payload can never
// succeed, a declined card is retried, a busy gateway says when to come back.
func chargeCard(ctx context.Context, msg *streamq.Message) error {
	var req struct {
		Card   string `json:"card"`
		Amount int    `json:"amount"`
	}
	if err := json.Unmarshal(msg.Payload, &req); err != nil {
		return streamq.Permanent(fmt.Errorf("invalid payload: %w", err))
	}
	switch req.Card {
	case "declined":
		return errors.New("card declined")
	case "busy":
		return streamq.RetryAfter(30*time.Second, errors.New("gateway busy"))
	case "locked":
		return streamq.Postpone(time.Minute, errors.New("account locked for maintenance"))
	case "bug":
		panic("unexpected card state") // a bug: recovered as a *streamq.PanicError
	}
	return nil
}

// ExampleWorker_Work checks a handler's verdicts without Redis: the worker
// runs it as a consumer with the same ConsumerConfig would, and says what
// the consumer would do with the job.
func ExampleWorker_Work() {
	t := newExampleT() // in a test: the *testing.T
	defer t.finish()
	ctx := context.Background()

	// readme:testing-worker:begin
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(chargeCard), &streamq.ConsumerConfig{
		MaxDeliveries: 3,
		Backoff:       func(attempt int) time.Duration { return time.Duration(attempt) * time.Second },
	})
	for _, job := range []streamqtest.Job{
		{Payload: []byte(`{"card":"ok","amount":10}`)},
		{Payload: []byte(`{"card":"declined"}`), Attempt: 2},
		{Payload: []byte(`{"card":"declined"}`), Attempt: 3},
		{Payload: []byte(`{"card":"busy"}`)},
		{Payload: []byte(`{"card":"locked"}`), Attempt: 3},
		{Payload: []byte(`{"card":"bug"}`)},
		{Payload: []byte(`not json`)},
	} {
		res, err := w.Work(ctx, &job)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-27s attempt %d: %s", job.Payload, max(job.Attempt, 1), res.Outcome)
		switch res.Outcome {
		case streamqtest.Retried, streamqtest.Postponed:
			fmt.Printf(" in %s", res.RetryIn)
		case streamqtest.DeadLettered:
			fmt.Printf(" (%s)", res.Reason)
		}
		var pe *streamq.PanicError
		if errors.As(res.Err, &pe) {
			fmt.Print(", the handler panicked")
		}
		fmt.Println()
	}
	// readme:testing-worker:end
	// Output:
	// {"card":"ok","amount":10}   attempt 1: acked
	// {"card":"declined"}         attempt 2: retried in 2s
	// {"card":"declined"}         attempt 3: dead_lettered (max_deliveries)
	// {"card":"busy"}             attempt 1: retried in 30s
	// {"card":"locked"}           attempt 3: postponed in 1m0s
	// {"card":"bug"}              attempt 1: retried in 1s, the handler panicked
	// not json                    attempt 1: dead_lettered (permanent)
}
