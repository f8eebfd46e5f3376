// Package redact keeps credentials out of what streamq's programs print: a
// Redis URL shown in a message has its password replaced, and an error about
// a malformed URL never quotes it.
package redact

import (
	"errors"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Mask stands in for a removed password.
const Mask = "xxxxx"

// ParseURL is redis.ParseURL whose error never holds a credential of raw:
// it names the URL as [URL] shows it and says what is wrong. Every program
// that reads a Redis URL from a flag or the environment parses it here.
func ParseURL(raw string) (*redis.Options, error) {
	o, err := redis.ParseURL(raw)
	if err == nil {
		return o, nil
	}
	msg := URL(raw) + ": " + reason(raw, err)
	user, password, _ := userinfo(raw)
	secret := password
	if secret == "" {
		secret = user // redis://secret@host: some clients read it as a password
	}
	forms := []string{secret}
	if dec, derr := url.PathUnescape(secret); derr == nil && dec != secret {
		forms = append(forms, dec)
	}
	for _, s := range forms {
		if s == "" || !strings.Contains(msg, s) {
			continue
		}
		if len(s) < 4 { // too short to replace without garbling the rest
			return nil, errors.New("the Redis URL is not valid, and saying where would show its password: " +
				"check the scheme (redis://, rediss:// or unix://), the port, the database number and the options")
		}
		msg = strings.ReplaceAll(msg, s, Mask)
	}
	return nil, errors.New(msg)
}

// reason is the part of a parse error of raw that can be shown, before the
// password is removed from it.
func reason(raw string, err error) string {
	_, _, hasInfo := userinfo(raw)
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err.Error()
	}
	// url.Parse quotes the whole URL, and its reason may quote a piece of a
	// password it mistook for a port or an escape.
	if hasInfo {
		return "not a valid URL: check the port (digits only), and percent-encode the user name and password " +
			"(%40 for @, %3A for :, %2F for /, %25 for %)"
	}
	return "not a valid URL: " + ue.Err.Error()
}

// URL returns raw with its password replaced by Mask, keeping the user name;
// user information without a password (redis://secret@host, the form some
// clients read as a password) is replaced whole. It works on URLs that do
// not parse, cutting the user information at the last "@" of the authority:
// it may hide more than the password, never less.
func URL(raw string) string {
	user, _, hasInfo := userinfo(raw)
	if !hasInfo {
		return raw
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	at := lastAt(rest)
	info := Mask
	if strings.Contains(rest[:at], ":") {
		info = user + ":" + Mask
	}
	return scheme + "://" + info + rest[at:]
}

// userinfo returns the user name and password written in raw (still
// percent-encoded) and whether raw has user information.
func userinfo(raw string) (user, password string, ok bool) {
	_, rest, found := strings.Cut(raw, "://")
	if !found {
		return "", "", false
	}
	at := lastAt(rest)
	if at < 0 {
		return "", "", false
	}
	user, password, _ = strings.Cut(rest[:at], ":")
	return user, password, true
}

// lastAt is the index of the "@" that ends the user information of rest (a
// URL after its "://"), or -1. A password may hold "/", "?" or "#" that its
// writer forgot to encode, so the last "@" of the whole string is taken.
func lastAt(rest string) int {
	return strings.LastIndexByte(rest, '@')
}
