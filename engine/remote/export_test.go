package remote

import "time"

// SetFeedPoll sets how often f looks when nothing rang, for tests that
// must tell a ring from a poll.
func SetFeedPoll(f *Feed, every time.Duration) { f.poll = every }

// FeedWaitsForRing says that f's next read waits for a ring before it
// looks: the last message it read came on its ring.
func FeedWaitsForRing(f *Feed) bool { return f.waitRing }
