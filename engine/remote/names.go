package remote

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
)

// Streams and buckets on the hub.
const (
	StepsStream  = "APOLLO_STEPS"
	EventsStream = "APOLLO_EVENTS"
	OutputStream = "APOLLO_OUTPUT"
	LogStream    = "APOLLO_LOG"
	LeaseBucket  = "apollo_leases"
	IdemBucket   = "apollo_idem"
	TasksBucket  = "apollo_tasks"
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

// TaskSteps is the filter of a task's attempts in the work queue, all
// pools'.
func TaskSteps(taskID string) string { return "apollo.step.*." + Token(taskID) + ".>" }

// PoolFilter is the subject filter of a pool's consumer.
func PoolFilter(pool string) string { return "apollo.step." + pool + ".>" }

// PoolConsumer is the durable consumer a pool's workers share.
func PoolConsumer(pool string) string { return "pool_" + pool }

// ContainerQueue is the subject token under which the attempts of pool's
// container steps (image:) wait: the pool's name and "~image", which no
// pool's name can be. Only the workers that run containers (apollo worker
// --container-engine) pull from it, so such a step never reaches a worker
// that would run its body on its host.
func ContainerQueue(pool string) string { return pool + "~image" }

// ContainerStepSubject is the subject of a container step's attempts in
// pool.
func ContainerStepSubject(pool, taskID, step string) string {
	return StepSubject(ContainerQueue(pool), taskID, step)
}

// ContainerPoolFilter is the subject filter of a pool's container consumer.
func ContainerPoolFilter(pool string) string { return PoolFilter(ContainerQueue(pool)) }

// ContainerPoolConsumer is the durable consumer that the workers of pool
// that run containers share, besides the pool's own (no pool's consumer
// name begins with "cpool_").
func ContainerPoolConsumer(pool string) string { return "cpool_" + pool }

// EventSubject is the subject on which the workers of pool report a
// task's events: with apollo hub --nkeys, only that pool's workers may
// publish to it.
func EventSubject(pool, taskID string) string { return "apollo.ev." + pool + "." + Token(taskID) }

// TaskEvents is the filter of a task's events, all pools': the coordinator
// reads them in the order the hub stored them.
func TaskEvents(taskID string) string { return "apollo.ev.*." + Token(taskID) }

// OutputSubject is the subject of a task's remote output from pool's
// workers.
func OutputSubject(pool, taskID string) string { return "apollo.out." + pool + "." + Token(taskID) }

// TaskOutput is the filter of a task's remote output, all pools'.
func TaskOutput(taskID string) string { return "apollo.out.*." + Token(taskID) }

// SubjectPool is the pool of an event or output subject ("" if it has none).
func SubjectPool(subject string) string {
	parts := strings.SplitN(subject, ".", 4)
	if len(parts) != 4 || parts[0] != "apollo" || (parts[1] != "ev" && parts[1] != "out") {
		return ""
	}
	return parts[2]
}

// CancelSubject is the core subject on which a coordinator asks the
// workers to end a task's running attempts (it was interrupted): a Cancel
// naming them.
func CancelSubject(taskID string) string { return "apollo.cancel." + Token(taskID) }

// LeaseKey is a task's key in the lease bucket.
func LeaseKey(taskID string) string { return "task." + Token(taskID) }

// markerKey is a marker's key in the idem bucket: the pool whose workers
// may write it (apollo hub --nkeys), the task, and the name, free text
// written in base64url, which key syntax allows.
func markerKey(pool, taskID, name string) string {
	return pool + "." + Token(taskID) + "." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// AttemptSecret is the secret of one dispatch: a keyed digest of its
// dispatch id under the coordinator's run key. The coordinator puts it in
// the attempt's message and takes a worker's report of the attempt only
// when it carries it; it is never written to a log or printed.
func AttemptSecret(key []byte, dispatchID string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(dispatchID))
	return hex.EncodeToString(mac.Sum(nil))
}

// SameSecret compares two secrets in constant time.
func SameSecret(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// AttemptID names one attempt of a task, for people: task/step/n.
func AttemptID(taskID, step string, attempt int) string {
	return taskID + "/" + step + "/" + strconv.Itoa(attempt)
}

// DispatchID names one attempt of one task run: the Msg-Id of its
// dispatch, and the stem of the ids of its events and output. run is the
// run's id (its log's run_nonce), so that a new log of the same task id
// (--fresh, after apollo gc, a replaced state folder) never dispatches
// under an id the hub still remembers from an earlier run, while a
// coordinator that restarts on the same log publishes the same ids again
// and the hub stores nothing twice.
func DispatchID(run, taskID, step string, attempt int) string {
	return run + "/" + AttemptID(taskID, step, attempt)
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

// WorkerPublish lists the subjects a worker of pools may publish to (apollo
// hub --nkeys): its pools' reports (events, output) and idem markers, reads
// of those markers, and the JetStream API calls of its pools' consumers and
// their acknowledgements — never a dispatch, another pool's reports,
// markers or work, nor a consumer whose filter is not its pool's.
func WorkerPublish(pools []string) []string {
	subs := []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + StepsStream, "$JS.API.STREAM.INFO." + EventsStream, "$JS.API.STREAM.INFO." + OutputStream,
		"$JS.API.STREAM.INFO.KV_" + IdemBucket,
	}
	for _, p := range pools {
		subs = append(subs,
			"apollo.ev."+p+".>", "apollo.out."+p+".>",
			"$KV."+IdemBucket+"."+p+".>",
			"$JS.API.DIRECT.GET.KV_"+IdemBucket+".$KV."+IdemBucket+"."+p+".>",
		)
		// The pool's consumer, and its container consumer (a worker
		// started with --container-engine).
		for _, cf := range [][2]string{{PoolConsumer(p), PoolFilter(p)}, {ContainerPoolConsumer(p), ContainerPoolFilter(p)}} {
			c := StepsStream + "." + cf[0]
			subs = append(subs,
				// The create call names its filter in its subject; the hub
				// refuses a body whose filter differs.
				"$JS.API.CONSUMER.CREATE."+c+"."+cf[1],
				"$JS.API.CONSUMER.INFO."+c,
				"$JS.API.CONSUMER.MSG.NEXT."+c,
				"$JS.ACK."+c+".>",
			)
		}
	}
	return subs
}

// WorkerInbox is the prefix of the reply subjects of a client whose NKey is
// publicKey: a worker may subscribe to its own replies only, never to the
// deliveries of another pool's work.
func WorkerInbox(publicKey string) string { return "_INBOX." + publicKey }

// WorkerSubscribe lists the subjects a worker with that NKey may subscribe
// to: replies to its own calls, and the coordinators' requests to end
// attempts.
func WorkerSubscribe(publicKey string) []string {
	return []string{WorkerInbox(publicKey) + ".>", "apollo.cancel.>"}
}
