package remote

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// Streams and buckets on the hub.
const (
	StepsStream  = "APOLLO_STEPS"
	EventsStream = "APOLLO_EVENTS"
	OutputStream = "APOLLO_OUTPUT"
	LeaseBucket  = "apollo_leases"
	IdemBucket   = "apollo_idem"
)

// DefaultPool is the pool of a step that names none, when the run names none.
const DefaultPool = "default"

// Token writes a task id as one subject token and key part: '.' becomes
// '=' and the '~' of a sub-pipeline's task id (which a key may not hold)
// '/', neither of which a task id can hold, so distinct ids stay distinct.
func Token(taskID string) string {
	return strings.ReplaceAll(strings.ReplaceAll(taskID, ".", "="), "~", "/")
}

// StepSubject is the subject of a step's attempts in pool.
func StepSubject(pool, taskID, step string) string {
	return "apollo.step." + pool + "." + Token(taskID) + "." + step
}

// PoolFilter is the subject filter of a pool's consumer.
func PoolFilter(pool string) string { return "apollo.step." + pool + ".>" }

// PoolConsumer is the durable consumer a pool's workers share.
func PoolConsumer(pool string) string { return "pool_" + pool }

// EventSubject is the subject of a task's events.
func EventSubject(taskID string) string { return "apollo.ev." + Token(taskID) }

// OutputSubject is the subject of a task's remote output.
func OutputSubject(taskID string) string { return "apollo.out." + Token(taskID) }

// CancelSubject is the core subject on which a coordinator asks the
// workers to end a task's running attempts (it was interrupted).
func CancelSubject(taskID string) string { return "apollo.cancel." + Token(taskID) }

// LeaseKey is a task's key in the lease bucket.
func LeaseKey(taskID string) string { return "task." + Token(taskID) }

// markerKey is a marker's key in the idem bucket: marker names are free
// text, so they are written in base64url, which key syntax allows.
func markerKey(taskID, name string) string {
	return Token(taskID) + "." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// AttemptID names one attempt: the Msg-Id of its dispatch, and the stem of
// its events' ids.
func AttemptID(taskID, step string, attempt int) string {
	return taskID + "/" + step + "/" + strconv.Itoa(attempt)
}

// ValidPool reports whether name can name a pool: [A-Za-z0-9_-]+.
func ValidPool(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// WorkerPublish lists the subjects a worker of pools may publish to: its
// reports (events, output), the idem bucket's keys, and the JetStream API
// calls of its pools' consumers, their acknowledgements and the bucket —
// never a dispatch, and never another pool's work.
func WorkerPublish(pools []string) []string {
	subs := []string{
		"apollo.ev.>", "apollo.out.>",
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + StepsStream, "$JS.API.STREAM.INFO." + EventsStream, "$JS.API.STREAM.INFO." + OutputStream,
		"$KV." + IdemBucket + ".>",
		"$JS.API.STREAM.INFO.KV_" + IdemBucket,
		"$JS.API.STREAM.MSG.GET.KV_" + IdemBucket,
		"$JS.API.DIRECT.GET.KV_" + IdemBucket + ".>",
		"$JS.API.CONSUMER.CREATE.KV_" + IdemBucket + ".>",
		"$JS.API.CONSUMER.DELETE.KV_" + IdemBucket + ".>",
	}
	for _, p := range pools {
		c := StepsStream + "." + PoolConsumer(p)
		subs = append(subs,
			"$JS.API.CONSUMER.CREATE."+c, "$JS.API.CONSUMER.CREATE."+c+".>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+c,
			"$JS.API.CONSUMER.INFO."+c,
			"$JS.API.CONSUMER.MSG.NEXT."+c,
			"$JS.ACK."+c+".>",
		)
	}
	return subs
}

// WorkerSubscribe lists the subjects a worker may subscribe to: replies
// to its own calls, and the coordinators' requests to end attempts.
func WorkerSubscribe() []string { return []string{"_INBOX.>", "apollo.cancel.>"} }
