package notify

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
)

// Webhook posts a message as JSON to URL.
type Webhook struct {
	URL    string
	Client *http.Client // nil: http.DefaultClient
}

// Send posts m's JSON. The message id is also in the Idempotency-Key and
// X-Apollo-Notification-Id headers. A 2xx answer is success; a 4xx other
// than 408 and 429 is a Permanent error.
func (w Webhook) Send(ctx context.Context, m *Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(m.JSON()))
	if err != nil {
		return &Permanent{fmt.Errorf("webhook: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "apollo")
	req.Header.Set("Idempotency-Key", m.ID)
	req.Header.Set("X-Apollo-Notification-Id", m.ID)
	c := w.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", redactURL(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return &Permanent{fmt.Errorf("webhook answered %s: %s", resp.Status, firstLine(string(body)))}
	}
	return fmt.Errorf("webhook answered %s: %s", resp.Status, firstLine(string(body)))
}

// redactURL drops the URL from a client error: a webhook URL often holds
// its token (Slack's do), and the error goes to the log.
func redactURL(err error) error {
	if ue, ok := err.(interface{ Unwrap() error }); ok {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
