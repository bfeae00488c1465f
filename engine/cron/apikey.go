package cron

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// A run started through the API with an Idempotency-Key records on its
// started entry the key api:<id>:<request>: id is a digest of the client's
// user and key, request a digest of the user and what was asked. The log
// keeps them (never the key itself), so that serve answers a retried
// request with the run it started, across its own restarts.

// APIKey is the Key of the started entry of a run that user started with
// the Idempotency-Key key, for request (the pipeline and the body), and
// its id, which Keyed looks up.
func APIKey(user, key string, request []byte) (entryKey, id string) {
	id = digest(user + "\x00" + key)
	return "api:" + id + ":" + digest(user+"\x00"+string(request)), id
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// apiKeyID is the id of an entry's Key made by APIKey.
func apiKeyID(key string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(key, "api:")
	if !ok {
		return "", false
	}
	id, _, ok = strings.Cut(rest, ":")
	return id, ok && id != ""
}

// Keyed returns the started entry of the run whose Idempotency-Key has id
// (APIKey), if the schedule log has one, and whether the request it was
// started for is the one whose entry key is entryKey. Its PID is the
// child's when this serve started it.
func (s *Scheduler) Keyed(id, entryKey string) (e Entry, same, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, found := s.keyed[id]
	if !found {
		return Entry{}, false, false
	}
	return *got, got.Key == entryKey, true
}
