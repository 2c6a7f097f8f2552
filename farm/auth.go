package farm

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Auth is how a farm proves itself to an external NATS server, and how it
// checks the server: the usual NATS options. Secrets come from files or
// the environment, never from a command line (where ps and the shell's
// history show them).
type Auth struct {
	// User and Password: plain user authentication. Password is read from
	// PasswordFile, else from $NATS_PASSWORD.
	User, PasswordFile string
	// TokenFile holds a token (else $NATS_TOKEN).
	TokenFile string
	// NKeyFile is an nkey seed file (NATS's nk tool makes one); CredsFile
	// a user JWT and its seed (nsc's .creds).
	NKeyFile, CredsFile string
	// TLS: the CA that signed the servers' certificates, and a client
	// certificate and its key where the servers ask for one.
	TLSCA, TLSCert, TLSKey string
}

// Environment variables Auth reads.
const (
	EnvUser     = "NATS_USER"
	EnvPassword = "NATS_PASSWORD"
	EnvToken    = "NATS_TOKEN"
	EnvCreds    = "NATS_CREDS"
	EnvNKey     = "NATS_NKEY"
)

// CheckURL refuses server URLs that hold a password or a token in clear:
// "nats://user:secret@host" is seen by anyone who can list the processes.
// A URL may name the user alone ("nats://alice@host:4222"), whose password
// then comes from $NATS_PASSWORD or a file.
func CheckURL(urls string) error {
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			return fmt.Errorf("--nats %q: an empty server URL", urls)
		}
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			if !strings.Contains(u, "://") {
				continue // host:port, as nats.go takes it
			}
			return fmt.Errorf("--nats: %q is not a server URL (nats://host:4222)", redact(u))
		}
		if _, set := p.User.Password(); set {
			return fmt.Errorf("--nats %s: the URL holds a password in clear, which anyone listing the processes can read; keep only the user in it (nats://%s@%s) and put the password in $%s or a file (--nats-password-file)",
				redact(u), p.User.Username(), p.Host, EnvPassword)
		}
	}
	return nil
}

// redact is a URL with its password, if any, replaced.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// Options are the NATS client options for urls with a: the credentials,
// the TLS settings, and urls as they must be dialled (with the user taken
// out of them: nats.go would send a user in a URL with an empty password).
func (a Auth) Options(urls string) (dial string, opts []nats.Option, err error) {
	if err := CheckURL(urls); err != nil {
		return "", nil, err
	}
	user := a.User
	var list []string
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if p, err := url.Parse(u); err == nil && p.User != nil {
			if user != "" && user != p.User.Username() {
				return "", nil, fmt.Errorf("--nats: the URL's user %q is not --nats-user %q", p.User.Username(), user)
			}
			user = p.User.Username()
			p.User = nil
			u = p.String()
		}
		list = append(list, u)
	}
	if user == "" {
		user = os.Getenv(EnvUser)
	}
	read := func(flag, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flag, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", fmt.Errorf("%s %s: the file is empty", flag, path)
		}
		return s, nil
	}
	methods := 0
	if user != "" {
		pass := os.Getenv(EnvPassword)
		if a.PasswordFile != "" {
			if pass, err = read("--nats-password-file", a.PasswordFile); err != nil {
				return "", nil, err
			}
		}
		if pass == "" {
			return "", nil, fmt.Errorf("NATS user %q has no password: put it in $%s or a file (--nats-password-file)", user, EnvPassword)
		}
		opts = append(opts, nats.UserInfo(user, pass))
		methods++
	} else if a.PasswordFile != "" {
		return "", nil, errors.New("--nats-password-file without a user: give --nats-user, $NATS_USER or nats://USER@host")
	}
	token := os.Getenv(EnvToken)
	if a.TokenFile != "" {
		if token, err = read("--nats-token-file", a.TokenFile); err != nil {
			return "", nil, err
		}
	}
	if token != "" {
		opts = append(opts, nats.Token(token))
		methods++
	}
	nkey := a.NKeyFile
	if nkey == "" {
		nkey = os.Getenv(EnvNKey)
	}
	if nkey != "" {
		o, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return "", nil, fmt.Errorf("--nats-nkey %s: %w", nkey, err)
		}
		opts = append(opts, o)
		methods++
	}
	creds := a.CredsFile
	if creds == "" {
		creds = os.Getenv(EnvCreds)
	}
	if creds != "" {
		if _, err := os.Stat(creds); err != nil {
			return "", nil, fmt.Errorf("--nats-creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(creds))
		methods++
	}
	if methods > 1 {
		return "", nil, errors.New("NATS credentials: give one of a user and password, a token, an nkey or a creds file")
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return "", nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	for _, p := range []struct{ flag, path string }{{"--nats-tls-ca", a.TLSCA}, {"--nats-tls-cert", a.TLSCert}, {"--nats-tls-key", a.TLSKey}} {
		if p.path != "" {
			if _, err := os.Stat(p.path); err != nil {
				return "", nil, fmt.Errorf("%s: %w", p.flag, err)
			}
		}
	}
	return strings.Join(list, ","), opts, nil
}
