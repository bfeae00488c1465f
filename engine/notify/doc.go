// Package notify delivers notifications: a JSON POST to a webhook (with a
// Slack-compatible text field beside the event's fields) or an email
// through SMTP (STARTTLS when the server offers it, AUTH PLAIN when a user
// is set). A Queue sends each message from its own goroutine, retrying with
// a bounded backoff, and tells a Recorder how each one ended; the engine
// records those ends in the task's event log and waits at the end of a run
// only a bounded time for what is still on its way. Messages arrive here
// with their secrets already masked: this package writes nothing to disk.
package notify
