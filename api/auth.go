package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Authentication: bearer tokens with roles.
//
//   - submit: POST /v1/transactions, and the caller's decision of one it prepared (POST
//     /v1/transactions/{id}/commit and /rollback)
//   - read:   every GET (transactions, lists, admin views, /metrics)
//   - admin:  everything else (retry/abort/resolve, POST /v1/recovery/run, any other verb),
//     and read and submit
//
// /healthz, /readyz, /openapi.yaml and the console's static files (/ui, /ui/…: no data; the
// console calls the API with the operator's token, console.go) are open. Without tokens the
// API is open (the service refuses to listen beyond the loopback interface without tokens
// unless told to; see service.Config.Validate). The rule is by method and path, before
// routing: a path the rule does not know needs admin (a new mutating endpoint is closed by
// default).

// Role is what a token may do.
type Role string

// The roles. Admin implies read and submit.
const (
	RoleSubmit Role = "submit"
	RoleRead   Role = "read"
	RoleAdmin  Role = "admin"
)

// Roles lists the roles in the order the documentation gives them.
var Roles = []Role{RoleSubmit, RoleRead, RoleAdmin}

// Secret is a credential. It never prints: String, GoString, LogValue and MarshalText all give
// "[REDACTED]", so a Secret inside a struct stays hidden in fmt verbs, slog and JSON.
type Secret string

// Redacted is what a Secret prints as.
const Redacted = "[REDACTED]"

func (Secret) String() string                  { return Redacted }
func (Secret) GoString() string                { return `"` + Redacted + `"` }
func (Secret) LogValue() slog.Value            { return slog.StringValue(Redacted) }
func (Secret) MarshalText() ([]byte, error)    { return []byte(Redacted), nil }
func (s Secret) Format(f fmt.State, verb rune) { _, _ = fmt.Fprint(f, Redacted) }

// Reveal returns the secret's text, for the one place that must compare or send it.
func (s Secret) Reveal() string { return string(s) }

// Token is one API bearer token: a name (what who(r) records), its roles and the secret.
type Token struct {
	Name   string
	Roles  []Role
	Secret Secret
}

// Has reports whether the token grants role (admin grants every role).
func (t Token) Has(role Role) bool {
	return slices.Contains(t.Roles, role) || slices.Contains(t.Roles, RoleAdmin)
}

// String is "name:role,role", without the secret.
func (t Token) String() string {
	roles := make([]string, len(t.Roles))
	for i, r := range t.Roles {
		roles[i] = string(r)
	}
	return t.Name + ":" + strings.Join(roles, ",")
}

// LogValue shows the name and roles only.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

var (
	tokenName   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	tokenSecret = regexp.MustCompile(`^[A-Za-z0-9._~+/=:-]+$`)
)

// MinTokenLength is the shortest secret accepted: at least 128 bits of a random hex or base64
// string (`openssl rand -hex 24` gives 48 characters).
const MinTokenLength = 16

// ParseTokens reads COORDINATOR_TOKENS: entries "name:role[,role]:token" separated by ";" or
// white space (newlines in a file). Errors name the entry by its position only: no part of a
// malformed entry is printed back, since a misplaced token would sit where the name or the
// role is expected.
func ParseTokens(s string) ([]Token, error) {
	var out []Token
	names := map[string]bool{}
	secrets := map[[32]byte]int{}
	entries := strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	for i, e := range entries {
		name, rest, ok1 := strings.Cut(e, ":")
		roleList, secret, ok2 := strings.Cut(rest, ":")
		where := fmt.Sprintf("COORDINATOR_TOKENS: entry %d", i+1)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s is not name:role[,role]:token", where)
		}
		if !tokenName.MatchString(name) {
			return nil, fmt.Errorf("%s: the name must be 1-64 characters of [A-Za-z0-9._-]", where)
		}
		if names[name] {
			return nil, fmt.Errorf("%s: the name is used twice", where)
		}
		names[name] = true
		var roles []Role
		for _, r := range strings.Split(roleList, ",") {
			role := Role(strings.ToLower(strings.TrimSpace(r)))
			if !slices.Contains(Roles, role) {
				return nil, fmt.Errorf("%s: an unknown role (want submit, read or admin, separated by commas)", where)
			}
			if !slices.Contains(roles, role) {
				roles = append(roles, role)
			}
		}
		if len(secret) < MinTokenLength {
			return nil, fmt.Errorf("%s: the token must be at least %d characters (e.g. `openssl rand -hex 24`)", where, MinTokenLength)
		}
		if !tokenSecret.MatchString(secret) {
			return nil, fmt.Errorf("%s: the token may hold letters, digits and ._~+/=:- only", where)
		}
		sum := sha256.Sum256([]byte(secret))
		if other, dup := secrets[sum]; dup {
			return nil, fmt.Errorf("%s: the same token as entry %d; give every client its own", where, other)
		}
		secrets[sum] = i + 1
		out = append(out, Token{Name: name, Roles: roles, Secret: Secret(secret)})
	}
	return out, nil
}

// openPaths need no token (GET and HEAD only).
var openPaths = map[string]bool{"/healthz": true, "/readyz": true, "/openapi.yaml": true}

// requiredRole is the role a request needs; open reports a request that needs none. Only an
// exact, unescaped path is open or submit: anything else falls through to the stricter rule.
func requiredRole(r *http.Request) (role Role, open bool) {
	exact := r.URL.RawPath == ""
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if exact && (openPaths[r.URL.Path] || isConsolePath(r.URL.Path)) {
			return "", true
		}
		return RoleRead, false
	case http.MethodPost:
		if exact && (r.URL.Path == "/v1/transactions" || decisionPath(r.URL.Path)) {
			return RoleSubmit, false
		}
	}
	return RoleAdmin, false
}

type callerKey struct{}

// callerRolesKey holds the caller's token's roles (GET /v1/status reports them).
type callerRolesKey struct{}

// who names the caller of a request for the event history: the token's name, or "anonymous"
// when the API runs without tokens.
func who(r *http.Request) string {
	if name, ok := r.Context().Value(callerKey{}).(string); ok {
		return name
	}
	return "anonymous"
}

// keyring holds the configured tokens by the SHA-256 of their secret. Comparing fixed-length
// digests with crypto/subtle, against every entry without stopping at a match, takes the same
// time whichever token (or none) matches and whatever the presented token's length.
type keyring struct {
	sums   [][32]byte
	tokens []Token
}

func newKeyring(tokens []Token) *keyring {
	k := &keyring{tokens: tokens}
	for _, t := range tokens {
		k.sums = append(k.sums, sha256.Sum256([]byte(t.Secret.Reveal())))
	}
	return k
}

func (k *keyring) lookup(presented string) (Token, bool) {
	sum := sha256.Sum256([]byte(presented))
	match := -1
	for i := range k.sums {
		if subtle.ConstantTimeCompare(sum[:], k.sums[i][:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Token{}, false
	}
	return k.tokens[match], true
}

// bearer returns the token of an "Authorization: Bearer <token>" header (scheme
// case-insensitive, RFC 7235).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

const realm = `Bearer realm="coordinator"`

// authenticate checks the bearer token and the role of every request that is not open.
// Missing or unknown token: 401 with WWW-Authenticate; a valid token without the role: 403.
// Tokens are never logged.
func (s *Server) authenticate() func(http.Handler) http.Handler {
	if len(s.cfg.Tokens) == 0 {
		return func(next http.Handler) http.Handler { return next }
	}
	keys := newKeyring(s.cfg.Tokens)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			role, open := requiredRole(r)
			if open {
				next.ServeHTTP(w, r)
				return
			}
			presented, ok := bearer(r)
			if !ok {
				if ok, dropped := s.refusalLog.allow(); ok {
					s.cfg.Logger.Debug("request refused: no bearer token", refusalAttrs(r, dropped)...)
				}
				w.Header().Set("WWW-Authenticate", realm)
				s.writeError(w, r, refuse(errUnauthorized, "missing bearer token: send the header Authorization: Bearer <token>"))
				return
			}
			tok, ok := keys.lookup(presented)
			if !ok {
				if ok, dropped := s.refusalLog.allow(); ok {
					s.cfg.Logger.Warn("request refused: unknown bearer token", refusalAttrs(r, dropped)...)
				}
				w.Header().Set("WWW-Authenticate", realm+`, error="invalid_token", error_description="unknown token"`)
				s.writeError(w, r, refuse(errUnauthorized, "invalid bearer token"))
				return
			}
			if !tok.Has(role) {
				if ok, dropped := s.refusalLog.allow(); ok {
					s.cfg.Logger.Warn("request refused: token lacks the role", refusalAttrs(r, dropped,
						slog.String("token", tok.Name), slog.String("role", string(role)))...)
				}
				w.Header().Set("WWW-Authenticate", realm+`, error="insufficient_scope", scope="`+string(role)+`"`)
				s.writeError(w, r, refuse(errForbidden, fmt.Sprintf("token %q lacks the %s role that %s %s needs", tok.Name, role, r.Method, r.URL.Path)))
				return
			}
			ctx := context.WithValue(r.Context(), callerKey{}, tok.Name)
			next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, callerRolesKey{}, tok.Roles)))
		})
	}
}

// middleware lists the router's middleware, outermost first. A middleware that should see the
// requests auth refuses (401/403) goes before authenticate.
func (s *Server) middleware() []func(http.Handler) http.Handler {
	return []func(http.Handler) http.Handler{
		s.traced(),      // trace.go: the request's span, from its traceparent
		s.instrument(),  // metrics.go: counts refused requests too
		s.limit(),       // limits.go: before auth, so that a flood of bad tokens is bounded too
		s.crossOrigin(), // console.go: a forged browser request is refused whatever it carries
		s.authenticate(),
	}
}
