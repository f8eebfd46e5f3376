package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Schedules returns the periodic schedules of queue ("" = of every
// registered queue), sorted by queue and name, with their last enqueued
// tick and the next one the schedulers expect. Schedulers record their
// schedules when they start and after each tick; a schedule whose
// schedulers stopped keeps its last NextTick, now in the past.
func (in *Inspector) Schedules(ctx context.Context, queue string) ([]Schedule, error) {
	queues := []string{queue}
	if queue == "" {
		qs, err := in.Queues(ctx)
		if err != nil {
			return nil, err
		}
		queues = queues[:0]
		for _, q := range qs {
			queues = append(queues, q.Name)
		}
	}
	out := []Schedule{}
	for _, name := range queues {
		k := rdb.NewKeys(in.opts.Prefix, name)
		specs, err := in.rdb.HGetAll(ctx, k.Part(rdb.PartSchedules)).Result()
		if err != nil {
			return nil, fmt.Errorf("inspect: schedules of %s: %w", name, err)
		}
		names := make([]string, 0, len(specs))
		for n := range specs {
			names = append(names, n)
		}
		slices.Sort(names)
		pipe := in.rdb.Pipeline()
		last := make([]*redis.StringCmd, len(names))
		for i, n := range names {
			last[i] = pipe.Get(ctx, k.Part(rdb.PartLastTick+n))
		}
		if len(names) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("inspect: schedules of %s: %w", name, err)
			}
		}
		for i, n := range names {
			var v struct {
				Spec string `json:"spec"`
				Next int64  `json:"next"`
			}
			_ = json.Unmarshal([]byte(specs[n]), &v) // a malformed value shows no spec
			s := Schedule{Name: n, Queue: name, Spec: strings.TrimSpace(v.Spec), LastTick: wire.ParseMillis(last[i].Val())}
			if v.Next > 0 {
				s.NextTick = time.UnixMilli(v.Next)
			}
			out = append(out, s)
		}
	}
	return out, nil
}
