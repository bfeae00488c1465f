package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"apollo/engine/remote"
)

// chunk is the most output one message carries.
const chunk = 256 << 10

// streamer sends an attempt's output file to the coordinator as it grows:
// the executor writes (and caps) the file, the streamer reads what is new
// every so often and publishes it at its offset.
type streamer struct {
	c    *remote.Client
	work *remote.Work
	path string

	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	sent  int64
	err   error
}

func newStreamer(c *remote.Client, work *remote.Work, path string) *streamer {
	s := &streamer{c: c, work: work, path: path, stopc: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *streamer) loop() {
	defer close(s.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
			s.send(false)
		}
	}
}

// send publishes what the file holds beyond what was sent.
func (s *streamer) send(final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	f, left, err := s.open()
	if err != nil || f == nil {
		s.err = err
		return // an error, or nothing new
	}
	defer f.Close()
	buf := make([]byte, min(chunk, left))
	for {
		n, rerr := f.ReadAt(buf, s.sent)
		if n > 0 {
			o := remote.Output{Task: s.work.Task, Pool: s.work.Pool, Secret: s.work.Secret, Run: s.work.Run, Step: s.work.Step,
				Attempt: s.work.Attempt, Offset: s.sent, Data: buf[:n]}
			data, _ := json.Marshal(o)
			if _, _, err := s.c.Publish(context.Background(), remote.OutputSubject(s.work.Pool, s.work.Task), o.MsgID(), data); err != nil {
				s.err = err
				return
			}
			s.sent += int64(n)
		}
		if rerr == io.EOF || n == 0 {
			return
		}
		if rerr != nil {
			s.err = rerr
			return
		}
	}
}

// stop ends the streaming; with final, it sends what is left first, but
// for a last piece of at most remote.MaxTail bytes, which it returns for
// the end event to carry (one write to the hub instead of two). It returns
// how many bytes were sent as pieces, that tail, and why not all, if so.
func (s *streamer) stop(final bool) (int64, []byte, error) {
	close(s.stopc)
	<-s.done
	var tail []byte
	if final {
		var rest bool
		if tail, rest = s.tail(); !rest {
			s.send(true)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, tail, s.err
}

// tail reads what the file holds beyond what was sent when it is at most
// remote.MaxTail bytes (nil when nothing is), and says whether that is the
// rest of it.
func (s *streamer) tail() ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, false
	}
	f, left, err := s.open()
	if err != nil {
		return nil, false
	}
	if f == nil {
		return nil, true // nothing left
	}
	defer f.Close()
	if left > remote.MaxTail {
		return nil, false
	}
	buf := make([]byte, left)
	n, err := f.ReadAt(buf, s.sent)
	if int64(n) != left || (err != nil && err != io.EOF) {
		return nil, false
	}
	return buf, true
}

// open opens the output file when some of it is not sent yet, and says
// how much; the file is nil (and closed) when nothing is left, or when it
// is not there yet (nothing printed).
func (s *streamer) open() (*os.File, int64, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil // nothing printed yet
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	left := fi.Size() - s.sent
	if left <= 0 {
		f.Close()
		return nil, 0, nil
	}
	return f, left, nil
}
