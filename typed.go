package streamq

import (
	"context"
	"fmt"
)

// JobArgs are the arguments of a typed job. Kind names the job's type of
// work: it is stored with the job, and a [Mux] routes the job by it to the
// function [Register]ed for the args type. Kind must return a constant and
// work on the zero value of the type (use a value receiver), since Register
// calls it on one; see [WithKind] for what a kind may contain.
type JobArgs interface {
	Kind() string
}

// JobArgsWithOptions are [JobArgs] with default enqueue options, which
// [EnqueueArgs] applies before the caller's (so the caller's win).
type JobArgsWithOptions interface {
	JobArgs
	InsertOpts() []EnqueueOption
}

// TypedJob is a job as a function [Register]ed for args of type T sees it:
// the message and its decoded args.
type TypedJob[T JobArgs] struct {
	*Message
	// Args are the job's args, decoded from its payload.
	Args T
}

// Register routes jobs of T's kind on m to fn, wrapped in mws (the first
// is the outermost): each job's payload is decoded into a T with m's
// [Codec] (see [MuxCodec]) and passed to fn. A payload that does not
// decode dead-letters the job at once with [ReasonMalformed] and the
// decode error (fn is not called). Like [Mux.Route], it panics if the kind
// is invalid or already routed, or if fn is nil.
func Register[T JobArgs](m *Mux, fn func(ctx context.Context, job *TypedJob[T]) error, mws ...Middleware) {
	kind := kindOf[T]()
	if fn == nil {
		panic(fmt.Sprintf("streamq: Register(%q): the function is nil", kind))
	}
	codec := m.codec
	m.Route(kind, HandlerFunc(func(ctx context.Context, msg *Message) error {
		job := &TypedJob[T]{Message: msg}
		if err := codec.Unmarshal(msg.Payload, &job.Args); err != nil {
			return fmt.Errorf("%w: the args of job %s (kind %q) do not decode into %T: %w", ErrMalformed, msg.JobID, kind, job.Args, err)
		}
		return fn(ctx, job)
	}), mws...)
}

// kindOf returns the kind of T, from its zero value.
func kindOf[T JobArgs]() (kind string) {
	var zero T
	defer func() {
		if r := recover(); r != nil {
			panic(fmt.Sprintf("streamq: Register: %T.Kind panicked on the zero value (%v): give the args type a Kind method with a value receiver that returns a constant", zero, r))
		}
	}()
	return zero.Kind()
}

// EnqueueArgs enqueues a typed job with p: args encoded with the producer's
// [Codec] (ProducerConfig.Codec) as the payload, and args.Kind() as the
// kind. The options of args (see [JobArgsWithOptions]) apply first, then
// opts. It returns what [Producer.Enqueue] returns; args that do not encode,
// or an option that sets another kind, fail with the error and nothing is
// written.
func EnqueueArgs(ctx context.Context, p *Producer, args JobArgs, opts ...EnqueueOption) (string, error) {
	ids, err := EnqueueArgsBatch(ctx, p, []JobArgs{args}, opts...)
	if len(ids) == 0 {
		return "", err
	}
	return ids[0], err
}

// EnqueueArgsBatch enqueues typed jobs of one kind as [Producer.EnqueueBatch]
// does (see [EnqueueArgs]): every args must have the kind of the first, and
// the options of the first (see [JobArgsWithOptions]) apply to the batch,
// before opts. Args that do not encode stop the call before anything is
// written.
func EnqueueArgsBatch[T JobArgs](ctx context.Context, p *Producer, args []T, opts ...EnqueueOption) ([]string, error) {
	if len(args) == 0 {
		return []string{}, nil
	}
	var o EnqueueOptions
	kind, err := argsOptions(&o, args[0], opts)
	if err != nil {
		return nil, fmt.Errorf("streamq: enqueue args on %s: %w", p.q.keys.Stream, err)
	}
	jobs := make([]Job, len(args))
	for i, a := range args {
		if k := a.Kind(); k != kind {
			return nil, fmt.Errorf("streamq: enqueue args on %s: %w", p.q.keys.Stream,
				configErr("args", "args %d has kind %q, the batch kind %q: enqueue one batch per kind", i, k, kind))
		}
		if jobs[i].Payload, err = p.codec.Marshal(a); err != nil {
			return nil, fmt.Errorf("streamq: enqueue args on %s: encode args %d of kind %q: %w", p.q.keys.Stream, i, kind, err)
		}
	}
	return p.enqueueWith(ctx, jobs, &o)
}

// argsOptions sets o from the options of first (see JobArgsWithOptions),
// then opts, then the kind of first, which it returns.
func argsOptions(o *EnqueueOptions, first JobArgs, opts []EnqueueOption) (string, error) {
	if first == nil {
		return "", configErr("args", "is nil: pass a value of a JobArgs type")
	}
	if wo, ok := first.(JobArgsWithOptions); ok {
		if err := buildOptions(o, wo.InsertOpts()); err != nil {
			return "", fmt.Errorf("InsertOpts of %T: %w", first, err)
		}
	}
	if err := buildOptions(o, opts); err != nil {
		return "", err
	}
	kind := first.Kind()
	if o.Kind != "" && o.Kind != kind {
		return "", configErr("WithKind", "sets kind %q on args of kind %q: the args' Kind names the kind; drop the option", o.Kind, kind)
	}
	return kind, WithKind(kind)(o)
}
