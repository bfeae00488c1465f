package remote

import (
	"time"

	"github.com/nats-io/nats.go"
)

// SetFeedPoll sets how often f looks when nothing rang, for tests that
// must tell a ring from a poll.
func SetFeedPoll(f *Feed, every time.Duration) { f.poll = every }

// FeedWaitsForRing says that f's next read waits for a ring before it
// looks: the last message it read came on its ring.
func FeedWaitsForRing(f *Feed) bool { return f.waitRing }

// FeedTakes says whether f would take ring r as its next message, without
// a read.
func FeedTakes(f *Feed, r *nats.Msg) bool { return f.take(r) != nil }

// FeedRings is how many rings f holds unheard.
func FeedRings(f *Feed) int { return len(f.bell) }
