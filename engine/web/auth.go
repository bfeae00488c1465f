package web

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// Auth says who may use apollo serve. With neither a token nor users, pages
// are open (serve then listens on loopback only) and interventions are
// refused: they need someone to name in the log.
type Auth struct {
	// Token, when set, is the one secret that lets a user in (a Bearer
	// header, or a session cookie from /login).
	Token []byte
	// Users are basic-auth users and their bcrypt password hashes.
	Users map[string][]byte

	secret []byte // signs session cookies and CSRF tokens; new each start
	dummy  []byte

	mu sync.Mutex
	ok map[[32]byte]string // sha256 of user:password already checked -> user
}

// LoadToken reads a token file: its first line, at least 16 characters.
func LoadToken(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	tok := bytes.TrimSpace(bytes.SplitN(data, []byte("\n"), 2)[0])
	if len(tok) < 16 {
		return nil, fmt.Errorf("token file %s: the token is %d characters; use at least 16 (openssl rand -hex 32)", path, len(tok))
	}
	return tok, nil
}

// LoadUsers reads a basic-auth file: lines user:bcrypt-hash (as htpasswd
// -B writes them); blank lines and lines starting with # are skipped.
func LoadUsers(path string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	defer f.Close()
	users := map[string][]byte{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%s:%d: expected user:bcrypt-hash", path, n)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%s:%d: user %q: the password is not a bcrypt hash (htpasswd -nB %s makes one): %v", path, n, user, user, err)
		}
		users[user] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("auth file %s has no users", path)
	}
	return users, nil
}

func (a *Auth) init() {
	a.secret = make([]byte, 32)
	rand.Read(a.secret)
	a.ok = map[[32]byte]string{}
	if len(a.Users) > 0 {
		// A hash to compare an unknown user's password with, so that the
		// time an answer takes does not tell which users exist.
		a.dummy, _ = bcrypt.GenerateFromPassword(a.secret[:16], bcrypt.DefaultCost)
	}
}

// Enabled reports whether users must sign in.
func (a *Auth) Enabled() bool { return a != nil && (len(a.Token) > 0 || len(a.Users) > 0) }

const sessionCookie = "apollo_session"

func (a *Auth) sign(what string) string {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte(what))
	return hex.EncodeToString(m.Sum(nil))
}

// user returns who sent r, when they proved it.
func (a *Auth) user(r *http.Request) (string, bool) {
	if !a.Enabled() {
		return "", false
	}
	if len(a.Token) > 0 {
		if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
			if subtle.ConstantTimeCompare([]byte(strings.TrimPrefix(h, "Bearer ")), a.Token) == 1 {
				return "token", true
			}
			return "", false
		}
		if c, err := r.Cookie(sessionCookie); err == nil && hmac.Equal([]byte(c.Value), []byte(a.sign("session:token"))) {
			return "token", true
		}
	}
	if len(a.Users) > 0 {
		user, pass, ok := r.BasicAuth()
		if !ok {
			return "", false
		}
		key := sha256.Sum256([]byte(user + "\x00" + pass))
		a.mu.Lock()
		known, hit := a.ok[key]
		a.mu.Unlock()
		if hit {
			return known, true
		}
		hash, found := a.Users[user]
		if !found {
			bcrypt.CompareHashAndPassword(a.dummy, []byte(pass))
			return "", false
		}
		if bcrypt.CompareHashAndPassword(hash, []byte(pass)) != nil {
			return "", false
		}
		a.mu.Lock()
		a.ok[key] = user
		a.mu.Unlock()
		return user, true
	}
	return "", false
}

// csrf is the token a form of user must send back: bound to the user and
// to this run of the server.
func (a *Auth) csrf(user string) string { return a.sign("csrf:" + user) }

// checkCSRF checks a state-changing request: its token, and that it came
// from a page of this server (Origin, else Referer, names its host).
func (a *Auth) checkCSRF(r *http.Request, user string) error {
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(a.csrf(user))) {
		return fmt.Errorf("the form's CSRF token is missing or stale: reload the page and try again")
	}
	from := r.Header.Get("Origin")
	if from == "" {
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return nil // a client that sends neither is not a browser
	}
	u, err := url.Parse(from)
	if err != nil || u.Host != r.Host {
		return fmt.Errorf("the request came from another site (%s)", from)
	}
	return nil
}
