package pipeline

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Notification events (docs/spec.md §2.13).
const (
	EventFailure   = "failure"
	EventSuccess   = "success"
	EventRetry     = "retry"
	EventRecovered = "recovered"
	EventSLAMissed = "sla_missed"
)

// NotifyEvents are the events a notify: entry may list, in the order the
// docs give them.
var NotifyEvents = []string{EventFailure, EventSuccess, EventRetry, EventRecovered, EventSLAMissed}

// Notify is one entry of a notify: list: the events it is sent on and its
// one target, a webhook or an email.
type Notify struct {
	On      []string
	Webhook string // the URL a JSON POST goes to
	Email   *Email
	Line    int
	// Target names the entry in the file: "notify[0]" at the top level,
	// "steps.load.notify[1]" in a step. Records name targets so, never by
	// URL or address.
	Target string
}

// Has reports whether n is sent on event.
func (n Notify) Has(event string) bool { return slices.Contains(n.On, event) }

// Email is an email target, sent through SMTP.
type Email struct {
	To   []string
	SMTP string // HOST:PORT
	From string
	User string
	// PasswordSecret names a secret of secrets: holding the SMTP password.
	PasswordSecret string
}

// notifyKeys and emailKeys are the keys of a notify entry and of its email
// mapping, in the order suggestions prefer them.
var (
	notifyKeys = []string{"on", "webhook", "email"}
	emailKeys  = []string{"to", "smtp", "from", "user", "password_secret"}
)

// secretRef is a password_secret, checked once secrets: is read.
type secretRef struct {
	at   where
	name string
	line int
}

// topNotify decodes the top-level notify key.
func (l *loader) topNotify(kv keyValue) {
	l.p.Notify = l.top().notifyList(kv.key, "notify", kv.v)
}

// notify decodes a step's notify key.
func (si *stepInfo) notify(kv keyValue) {
	si.s.Notify = si.at.notifyList(kv.key, "steps."+si.s.ID+".notify", kv.v)
	for _, n := range si.s.Notify {
		if n.Has(EventSLAMissed) {
			si.at.errf(n.Line, "notify: sla_missed is the task's event, raised by the top-level sla:; list it in the top-level notify:")
		}
	}
}

// notifyList decodes a notify: list; name is how targets are named.
func (w where) notifyList(key, name string, v *yaml.Node) []Notify {
	items, ok := w.list(key, "notification targets ({on: [failure], webhook: URL})", v)
	if !ok {
		return nil
	}
	var out []Notify
	for i, item := range items {
		if n, ok := w.notifyEntry(fmt.Sprintf("%s[%d]", key, i), item); ok {
			n.Target = fmt.Sprintf("%s[%d]", name, i)
			out = append(out, n)
		}
	}
	return out
}

func (w where) notifyEntry(key string, item *yaml.Node) (Notify, bool) {
	n := Notify{Line: item.Line}
	if item.Kind != yaml.MappingNode {
		w.errf(item.Line, "%s must be a mapping with on: and webhook: or email:, not %s", key, describe(item))
		return n, false
	}
	ok := true
	for _, p := range w.pairs(item) {
		k := key + "." + p.key
		switch p.key {
		case "on":
			events, good := w.list(k, "events", p.v)
			ok = ok && good
			for _, e := range events {
				s, good := w.text(k, e)
				switch {
				case !good:
					ok = false
				case !slices.Contains(NotifyEvents, s):
					w.errf(e.Line, "%s: unknown event %q; the events are %s%s", k, snippet(s),
						strings.Join(NotifyEvents, ", "), DidYouMean(s, NotifyEvents))
					ok = false
				case slices.Contains(n.On, s):
					w.errf(e.Line, "%s: event %q is listed twice", k, s)
					ok = false
				default:
					n.On = append(n.On, s)
				}
			}
		case "webhook":
			s, good := w.nonEmpty(k, p.v)
			if good {
				if err := checkWebhook(s); err != nil {
					w.errf(deref(p.v).Line, "%s: %v", k, err)
					good = false
				}
			}
			n.Webhook, ok = s, ok && good
		case "email":
			e, good := w.email(k, p.v)
			n.Email, ok = e, ok && good
		default:
			w.unknownKey(p.k, notifyKeys, map[string]string{"events": "on", "when": "on", "url": "webhook",
				"slack": "webhook", "mail": "email"})
			ok = false
		}
	}
	if len(n.On) == 0 && ok {
		w.errf(item.Line, "%s has no events; add on: [failure] (events: %s)", key, strings.Join(NotifyEvents, ", "))
		ok = false
	}
	switch {
	case n.Webhook != "" && n.Email != nil:
		w.errf(item.Line, "%s has both webhook: and email:; give one target per entry (add another entry for the other)", key)
		ok = false
	case n.Webhook == "" && n.Email == nil && ok:
		w.errf(item.Line, "%s has no target; add webhook: URL or email: {to: [...], smtp: HOST:PORT}", key)
		ok = false
	}
	return n, ok
}

// checkWebhook refuses a URL that is not an absolute http or https URL
// with a host.
func checkWebhook(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", snippet(s), err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q is not an http:// or https:// URL", snippet(s))
	case u.Host == "":
		return fmt.Errorf("%q has no host", snippet(s))
	}
	return nil
}

func (w where) email(key string, v *yaml.Node) (*Email, bool) {
	v = deref(v)
	if v.Kind != yaml.MappingNode {
		w.errf(v.Line, "%s must be a mapping with to: and smtp:, not %s", key, describe(v))
		return nil, false
	}
	e := &Email{}
	ok := true
	for _, p := range w.pairs(v) {
		k := key + "." + p.key
		var good bool
		switch p.key {
		case "to":
			var items []*yaml.Node
			items, good = w.list(k, "addresses", p.v)
			for _, it := range items {
				s, g := w.nonEmpty(k, it)
				if g && !strings.Contains(s, "@") {
					w.errf(it.Line, "%s: %q is not an email address", k, snippet(s))
					g = false
				}
				if g {
					e.To = append(e.To, s)
				}
				good = good && g
			}
		case "smtp":
			e.SMTP, good = w.nonEmpty(k, p.v)
			if good {
				if _, port, err := net.SplitHostPort(e.SMTP); err != nil || port == "" {
					w.errf(deref(p.v).Line, "%s: %q is not HOST:PORT (e.g. smtp.example.com:587)", k, snippet(e.SMTP))
					good = false
				}
			}
		case "from":
			e.From, good = w.nonEmpty(k, p.v)
		case "user":
			e.User, good = w.nonEmpty(k, p.v)
		case "password_secret":
			e.PasswordSecret, good = w.nonEmpty(k, p.v)
			if good {
				w.l.secretRefs = append(w.l.secretRefs, secretRef{at: w, name: e.PasswordSecret, line: deref(p.v).Line})
			}
		default:
			w.unknownKey(p.k, emailKeys, map[string]string{"server": "smtp", "host": "smtp", "username": "user",
				"password": "password_secret", "recipients": "to"})
		}
		ok = ok && good
	}
	if len(e.To) == 0 && ok {
		w.errf(v.Line, "%s has no to:; add to: [someone@example.com]", key)
		ok = false
	}
	if e.SMTP == "" && ok {
		w.errf(v.Line, "%s has no smtp:; add smtp: HOST:PORT", key)
		ok = false
	}
	if e.PasswordSecret != "" && e.User == "" && ok {
		w.errf(v.Line, "%s has password_secret but no user:; add the SMTP user name", key)
		ok = false
	}
	return e, ok
}

// checkNotifySecrets checks that every password_secret names a secret of
// secrets:.
func (l *loader) checkNotifySecrets() {
	for _, r := range l.secretRefs {
		found := false
		var names []string
		for _, s := range l.p.Secrets {
			names = append(names, s.Name)
			found = found || s.Name == r.name
		}
		if !found {
			r.at.errf(r.line, "password_secret %q is not a secret of this pipeline; declare it under secrets:%s",
				snippet(r.name), DidYouMean(r.name, names))
		}
	}
}

// sla decodes the top-level sla key: a Go duration ("30m", "2h").
func (l *loader) sla(kv keyValue) {
	top := l.top()
	s, ok := top.nonEmpty(kv.key, kv.v)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		top.errf(deref(kv.v).Line, "sla %q is not a positive duration; write one like 30m, 2h or 1h30m", snippet(s))
		return
	}
	l.p.SLA = d
}
