package dashboard

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/streamq/streamq/inspect"
)

// overviewTTL is how long one read of a queue's overview serves every page
// and refresh that asks for it. Each open tab refreshes its page every few
// seconds; tabs (and the overview page with the queue pages) within this
// window share one read of Redis, and concurrent requests share one call.
// An action on the queue forgets its overview, so the page it redirects to
// shows the action's effect.
const overviewTTL = time.Second

// overviews shares the overviews of queues between requests.
type overviews struct {
	now   func() time.Time
	group singleflight.Group

	mu sync.Mutex
	m  map[string]overviewRead
}

// overviewRead is one overview and when it was read.
type overviewRead struct {
	at time.Time
	ov inspect.Overview
}

// get returns the overview of q: one read within overviewTTL, or a new
// one. Every caller gets its own copy.
func (c *overviews) get(ctx context.Context, q *inspect.Queue) (*inspect.Overview, error) {
	name := q.Name()
	now := c.now()
	c.mu.Lock()
	r, ok := c.m[name]
	c.mu.Unlock()
	if ok && now.Sub(r.at) < overviewTTL && !now.Before(r.at) {
		ov := r.ov
		return &ov, nil
	}
	v, err, _ := c.group.Do(name, func() (any, error) {
		ov, err := q.Overview(ctx)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.m == nil {
			c.m = make(map[string]overviewRead)
		}
		c.m[name] = overviewRead{at: c.now(), ov: *ov}
		c.mu.Unlock()
		return *ov, nil
	})
	if err != nil {
		return nil, err
	}
	ov := v.(inspect.Overview)
	return &ov, nil
}

// forget drops the overview of the queue name, after an action changed it.
func (c *overviews) forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
	c.group.Forget(name)
}
