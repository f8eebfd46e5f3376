package rdb

import "github.com/redis/go-redis/v9"

// Scripts returns every script of the package by name, for tests that load
// them ahead of time or recognise them in command logs (TestScripts checks
// that it lists every script).
func Scripts() map[string]*redis.Script {
	return map[string]*redis.Script{
		"enqueue":               scriptEnqueue,
		"enqueue_unique":        scriptEnqueueUnique,
		"outbox":                scriptOutbox,
		"schedule":              scriptSchedule,
		"promote":               scriptPromote,
		"trim":                  scriptTrim,
		"move":                  scriptMove,
		"dead_letter":           scriptDeadLetter,
		"requeue":               scriptRequeue,
		"touch":                 scriptTouch,
		"charge":                scriptCharge,
		"reclaim":               scriptReclaim,
		"adopt":                 scriptAdopt,
		"prune":                 scriptPrune,
		"delayed_key":           scriptDelayedKey,
		"cancel":                scriptCancel,
		"ack":                   scriptAck,
		"tick":                  scriptTick,
		"write":                 scriptWrite,
		"ensure_version":        scriptEnsureVersion,
		"take_token":            scriptTakeToken,
		"priority_push":         scriptPush,
		"priority_forward":      scriptForward,
		"priority_pop":          scriptPop,
		"priority_pop_w":        scriptPopWeighted,
		"priority_finish":       scriptFinish,
		"priority_touch":        scriptKeepAlive,
		"priority_reap":         scriptReap,
		"priority_waiting":      scriptMarkWaiting,
		"priority_retry":        scriptRetry,
		"priority_dead":         scriptPriorityDeadLetter,
		"delete_waiting":        scriptDeleteWaiting,
		"delete_delayed":        scriptDeleteDelayed,
		"purge_dead":            scriptPurgeDead,
		"run_now":               scriptRunNow,
		"request_cancel":        scriptRequestCancel,
		"priority_control":      scriptPriorityControl,
		"level_heads":           scriptLevelHeads,
		"drop_cancels":          scriptDropCancels,
		"priority_drop_cancels": scriptPriorityDropCancels,
		"flow_read":             scriptFlowRead,
		"flow_admit":            scriptFlowAdmit,
		"flow_sweep":            scriptFlowSweep,
		"flow_ack":              scriptFlowAck,
		"flow_move":             scriptFlowMove,
		"flow_dead_letter":      scriptFlowDeadLetter,
		"flow_kick":             scriptFlowKick,
		"flow_delete":           scriptFlowDelete,
	}
}
