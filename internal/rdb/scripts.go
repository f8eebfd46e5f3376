package rdb

import "github.com/redis/go-redis/v9"

// Scripts returns every script of the package by name, for tests that load
// them ahead of time or recognise them in command logs (TestScripts checks
// that it lists every script). A script with a slot probe (see
// probedScript) is listed under its name as a queue outside a Cluster runs
// it, and under its name and "@cluster" as a queue on a Cluster does.
func Scripts() map[string]*redis.Script {
	m := map[string]*redis.Script{
		"enqueue":               scriptEnqueue,
		"enqueue_plain":         scriptEnqueuePlain,
		"enqueue_one":           scriptEnqueueOne,
		"enqueue_ids":           scriptEnqueueIDs,
		"trim":                  scriptTrim,
		"touch":                 scriptTouch,
		"charge":                scriptCharge,
		"reclaim":               scriptReclaim,
		"adopt":                 scriptAdopt,
		"prune":                 scriptPrune,
		"delayed_key":           scriptDelayedKey,
		"ack":                   scriptAck,
		"ack_completed":         scriptAckCompleted,
		"record_completed":      scriptRecordCompleted,
		"tick":                  scriptTick,
		"write":                 scriptWrite,
		"ensure_version":        scriptEnsureVersion,
		"take_token":            scriptTakeToken,
		"priority_push":         scriptPush,
		"priority_forward":      scriptForward,
		"priority_pop":          scriptPop,
		"priority_pop_w":        scriptPopWeighted,
		"priority_touch":        scriptKeepAlive,
		"priority_waiting":      scriptMarkWaiting,
		"delete_waiting":        scriptDeleteWaiting,
		"request_cancel":        scriptRequestCancel,
		"level_heads":           scriptLevelHeads,
		"drop_cancels":          scriptDropCancels,
		"priority_drop_cancels": scriptPriorityDropCancels,
		"start_lease":           scriptStartLease,
		"start_leases":          scriptLeases,
		"workflow_create":       scriptWorkflowCreate,
		"workflow_complete":     scriptWorkflowComplete,
		"workflow_released":     scriptWorkflowReleased,
		"workflow_release":      scriptWorkflowRelease,
		"workflow_cancel":       scriptWorkflowCancel,
		"workflow_results":      scriptWorkflowResults,
		"set_partitions":        scriptSetPartitions,
		"set_drain":             scriptSetDrain,
	}
	for name, s := range map[string]probedScript{
		"schedule":         scriptSchedule,
		"promote":          scriptPromote,
		"move":             scriptMove,
		"dead_letter":      scriptDeadLetter,
		"requeue":          scriptRequeue,
		"cancel":           scriptCancel,
		"priority_finish":  scriptFinish,
		"priority_reap":    scriptReap,
		"priority_retry":   scriptRetry,
		"priority_dead":    scriptPriorityDeadLetter,
		"delete_delayed":   scriptDeleteDelayed,
		"purge_dead":       scriptPurgeDead,
		"run_now":          scriptRunNow,
		"priority_control": scriptPriorityControl,
		"flow_read":        scriptFlowRead,
		"flow_admit":       scriptFlowAdmit,
		"flow_sweep":       scriptFlowSweep,
		"flow_ack":         scriptFlowAck,
		"flow_move":        scriptFlowMove,
		"flow_dead_letter": scriptFlowDeadLetter,
		"flow_kick":        scriptFlowKick,
		"flow_delete":      scriptFlowDelete,
	} {
		m[name] = s.plain
		m[name+"@cluster"] = s.cluster
	}
	return m
}
