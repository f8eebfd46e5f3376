package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// AfterEach returns a go-redis hook that calls fn with every command a
// client sends on its own (not in a pipeline), after its reply arrived. Add
// it with client.AddHook to watch what a consumer or worker sends and gets;
// fn must be safe for concurrent use.
func AfterEach(fn func(cmd redis.Cmder)) redis.Hook { return afterEach(fn) }

type afterEach func(cmd redis.Cmder)

func (h afterEach) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h afterEach) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h afterEach) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h(cmd)
		return err
	}
}
