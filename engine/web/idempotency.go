package web

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"sync"
)

// idempotency remembers, for the life of the serve process, the answer to
// each start of a run sent with an Idempotency-Key header, so that a client
// retrying the request gets the same run instead of a second one.
type idempotency struct {
	mu    sync.Mutex // held across a start, so that two tries of one key start one run
	seen  map[string]idemAnswer
	order []string
}

type idemAnswer struct {
	request [32]byte // sha256 of the request: user, pipeline, body
	body    []byte
}

// maxIdemKeys bounds what serve remembers; the oldest key is forgotten first.
const maxIdemKeys = 10000

// recorder keeps a copy of what a handler answers.
type recorder struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (r *recorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// once runs start unless key (of user) was seen: a replay of the same
// request answers 200 with the first answer's body; the same key with
// another request answers 422.
func (s *Server) once(w http.ResponseWriter, user, key string, request []byte, start func(http.ResponseWriter)) {
	id := user + "\x00" + key
	sum := sha256.Sum256(append([]byte(user+"\x00"), request...))
	m := &s.idem
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.seen[id]; ok {
		if a.request != sum {
			apiError(w, http.StatusUnprocessableEntity, "Idempotency-Key", "this Idempotency-Key was used for another request: use a new key for a new run")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusOK)
		w.Write(a.body)
		return
	}
	rec := &recorder{ResponseWriter: w}
	start(rec)
	if rec.code != http.StatusCreated {
		return
	}
	if m.seen == nil {
		m.seen = map[string]idemAnswer{}
	}
	if len(m.order) >= maxIdemKeys {
		delete(m.seen, m.order[0])
		m.order = m.order[1:]
	}
	m.seen[id] = idemAnswer{request: sum, body: bytes.Clone(rec.body.Bytes())}
	m.order = append(m.order, id)
}
