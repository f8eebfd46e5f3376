package streamq

import (
	"fmt"

	"github.com/streamq/streamq/internal/core"
)

// coreOptions applies opts, a []EnqueueOption, for the packages that store
// jobs to enqueue later (see core.Queue.Options): they take the options
// Enqueue takes, and get their errors at the same call.
func coreOptions(opts any) (core.EnqueueOptions, error) {
	list, ok := opts.([]EnqueueOption)
	if !ok {
		return core.EnqueueOptions{}, fmt.Errorf("streamq: options are %T, want []streamq.EnqueueOption", opts)
	}
	var o enqueueOptions
	for _, opt := range list {
		opt(&o)
	}
	if o.err != nil {
		return core.EnqueueOptions{}, o.err
	}
	return core.EnqueueOptions{Headers: o.headers, At: o.at, In: o.in, UniqueKey: o.uniqueKey, UniqueTTL: o.uniqueTTL}, nil
}
