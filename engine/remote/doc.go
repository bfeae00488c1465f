// Package remote is apollo's side of the hub (docs/spec.md §8): the names of
// the JetStream streams, key-value buckets and subjects a coordinator and its
// workers share, the messages they exchange, and a client whose every call
// has a short deadline and is retried until the hub has been unreachable
// for a stated limit. It holds what both sides need — the dispatch of one
// attempt, the feed of a task's events in stream order, the coordinator's
// lease, the idempotency markers — and nothing of the engine's scheduling
// or of a worker's loop.
//
// The layout on the hub:
//
//	APOLLO_STEPS   work queue  apollo.step.<pool>.<task>.<step>   one message per attempt, Msg-Id run/task/step/n
//	                           apollo.step.<pool>~image.<t>.<s>   the same, of a container step: for workers with an engine
//	APOLLO_EVENTS  limits      apollo.ev.<pool>.<task>            started, end, lost, marker: in order per task
//	APOLLO_OUTPUT  limits      apollo.out.<pool>.<task>           a remote attempt's output, in chunks at offsets
//	APOLLO_SCHED   limits      apollo.sched.<group>               apollo serve --hub's schedule log, fenced appends
//	apollo_leases  KV          task.<task>                        one coordinator per task
//	               KV          sched.<group>                      one leading serve per schedule group (key TTL)
//	apollo_idem    KV          <pool>.<task>.<marker>             idem.once gates of remote attempts
//
// Reports and markers are per pool, so that apollo hub --nkeys can let a
// worker write only its pools' (WorkerPublish). Each dispatch carries a
// secret of its attempt (AttemptSecret), which the worker's reports carry
// back: the coordinator takes no report without it.
//
// A task id may hold dots, which separate subject tokens, so in subjects and
// keys it is written with '=' for '.' (Token), a character task ids cannot
// hold; the '~' of a sub-pipeline's task id, which no key may hold, is
// written '/'.
package remote
