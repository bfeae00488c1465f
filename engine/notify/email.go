package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"
)

// Email sends a message through the SMTP server at Addr (HOST:PORT).
type Email struct {
	Addr     string
	From     string
	To       []string
	User     string
	Password string
	// TLS is the configuration of STARTTLS; nil verifies the server's
	// certificate against the system's roots for its host name.
	TLS *tls.Config
}

// Send delivers m: STARTTLS when the server offers it, AUTH PLAIN when
// User is set (net/smtp refuses to send a password in clear to any host
// but localhost), then one message with m's id as its Message-ID.
func (e Email) Send(ctx context.Context, m *Message) error {
	host, _, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return &Permanent{fmt.Errorf("email: smtp %q: %w", e.Addr, err)}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", e.Addr)
	if err != nil {
		return fmt.Errorf("email: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("email: %w", err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok {
		cfg := e.TLS
		if cfg == nil {
			cfg = &tls.Config{ServerName: host}
		}
		if err := c.StartTLS(cfg); err != nil {
			return fmt.Errorf("email: starttls: %w", err)
		}
	}
	if e.User != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return &Permanent{errors.New("email: the server offers no AUTH, and a user is set")}
		}
		if err := c.Auth(smtp.PlainAuth("", e.User, e.Password, host)); err != nil {
			return permanentIf5xx(fmt.Errorf("email: auth: %w", err), err)
		}
	}
	from := e.From
	if err := c.Mail(from); err != nil {
		return permanentIf5xx(fmt.Errorf("email: MAIL FROM: %w", err), err)
	}
	for _, to := range e.To {
		if err := c.Rcpt(to); err != nil {
			return permanentIf5xx(fmt.Errorf("email: RCPT TO %s: %w", to, err), err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("email: DATA: %w", err)
	}
	if _, err := w.Write(e.compose(m, host)); err != nil {
		return fmt.Errorf("email: %w", err)
	}
	if err := w.Close(); err != nil {
		return permanentIf5xx(fmt.Errorf("email: %w", err), err)
	}
	return c.Quit()
}

// compose is the message's text: headers, then the body, lines ending in
// CRLF.
func (e Email) compose(m *Message, host string) []byte {
	var b strings.Builder
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, oneLine(v)) }
	header("From", e.From)
	header("To", strings.Join(e.To, ", "))
	header("Subject", m.Text)
	header("Message-ID", "<"+m.ID+"@apollo>")
	header("Date", time.Now().Format(time.RFC1123Z))
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "8bit")
	header("X-Apollo-Notification-Id", m.ID)
	b.WriteString("\r\n")
	body := strings.ReplaceAll(m.Body(), "\r\n", "\n")
	b.WriteString(strings.ReplaceAll(body, "\n", "\r\n"))
	return []byte(b.String())
}

// oneLine keeps a header value on its line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

// permanentIf5xx makes err Permanent when the server's answer (cause) was
// a 5xx: a permanent refusal in SMTP.
func permanentIf5xx(err, cause error) error {
	var te *textproto.Error
	if errors.As(cause, &te) && te.Code >= 500 {
		return &Permanent{err}
	}
	return err
}
