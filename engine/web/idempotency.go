package web

import (
	"net/http"

	"apollo/engine/cron"
)

// once runs start unless the Idempotency-Key key of user started a run
// before: a replay of the same request answers 200 with that run (its task
// id, date, URL and page, and its pid while this serve follows it); the
// same key with another request answers 422. The schedule log is what
// remembers (cron.APIKey): a started entry carries a digest of the key and
// of the request, so a retry finds its run after a restart of serve too. A
// start that was refused records nothing, so it may be retried with its
// key.
func (s *Server) once(w http.ResponseWriter, user, key string, request []byte, start func(w http.ResponseWriter, entryKey string)) {
	sched := s.opts.Scheduler
	if sched == nil {
		start(w, "") // refused: runs cannot be started from here
		return
	}
	entryKey, id := cron.APIKey(user, key, request)
	s.idem.Lock() // two tries of one key at once start one run
	defer s.idem.Unlock()
	if en, same, found := sched.Keyed(id, entryKey); found {
		if !same {
			apiError(w, http.StatusUnprocessableEntity, "Idempotency-Key", "this Idempotency-Key was used for another request: use a new key for a new run")
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, startedAnswer(&en))
		return
	}
	start(w, entryKey)
}
