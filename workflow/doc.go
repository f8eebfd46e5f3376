// Package workflow runs jobs that depend on jobs: a workflow is a DAG of
// typed jobs, on any queues of one key prefix, enqueued all or nothing;
// a job is enqueued only once all its parents succeeded (or, by the policy
// of each dependency, finished). Chains (A, then B, then C) and batches
// (a callback when all members succeeded, one when all finished, dead
// letters included) are built on the same dependencies.
//
// Build a workflow with [New] and [Workflow.Add], enqueue it with
// [Client.Enqueue], put [Client.Middleware] in the consumers that run its
// jobs, and run [Client.Run] somewhere (it repairs what crashes leave).
// The state of a workflow lives under its own Redis Cluster hash tag; every
// change of it is one idempotent script in that slot, and every job is
// enqueued into its queue by one script in the queue's slot, under a mark
// that makes a repeated release store nothing twice. See docs/workflows.md.
package workflow
