package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// redisTLS is how the Redis client does TLS beyond what the URL says.
type redisTLS struct {
	// Enabled turns TLS on whatever the URL's scheme (REDIS_TLS); a
	// rediss:// URL turns it on too.
	Enabled bool
	// Cert and Key are a client certificate and its key (PEM files).
	Cert, Key string
	// CA is a PEM bundle Redis's certificate must chain to; empty: the
	// system roots.
	CA string
	// SkipHostnameVerification checks the chain but not the name
	// (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION), for Redis reached by an
	// address its certificate does not name.
	SkipHostnameVerification bool
}

func (t redisTLS) check(src func(string) string) error {
	if (t.Cert == "") != (t.Key == "") {
		return fmt.Errorf("%s and %s: give both or neither", src("redis-tls-cert"), src("redis-tls-key"))
	}
	return nil
}

// redis reads REDIS_URL with envoyproxy/ratelimit's companions
// (REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_AUTH, REDIS_TLS*) into our URL
// form. A REDIS_URL with a scheme is ours and is taken as it is.
func (r *envReader) redis() {
	t := &r.ev.redisTLS
	t.Enabled = r.bool("REDIS_TLS", false)
	t.SkipHostnameVerification = r.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)
	r.plain("redis-tls-cert", "", "REDIS_TLS_CLIENT_CERT")
	r.plain("redis-tls-key", "", "REDIS_TLS_CLIENT_KEY")
	r.plain("redis-tls-ca", "", "REDIS_TLS_CACERT")
	typ := strings.ToLower(r.getenv("REDIS_TYPE"))
	if typ != "" && typ != "single" && typ != "sentinel" && typ != "cluster" {
		r.fail("REDIS_TYPE", "%q: want single, sentinel or cluster", r.getenv("REDIS_TYPE"))
	}
	sock := strings.ToLower(r.getenv("REDIS_SOCKET_TYPE"))
	if sock != "" && sock != "tcp" && sock != "unix" {
		r.fail("REDIS_SOCKET_TYPE", "%q: want tcp or unix", r.getenv("REDIS_SOCKET_TYPE"))
	}
	r.plain("redis-url", "", "REDIS_URL")
	raw, auth := r.getenv("REDIS_URL"), r.getenv("REDIS_AUTH")
	if raw == "" || strings.Contains(raw, "://") {
		if auth != "" {
			r.fail("REDIS_AUTH", "set only with a host:port REDIS_URL; in a redis:// URL, write the password in the URL")
		}
		return
	}
	u, err := upstreamRedisURL(raw, typ, sock, auth, t.Enabled)
	if err != nil {
		r.fail("REDIS_URL", "%v", err)
		return
	}
	if sa := r.getenv("REDIS_SENTINEL_AUTH"); sa != "" {
		if !strings.HasPrefix(u, "redis-sentinel://") {
			r.fail("REDIS_SENTINEL_AUTH", "set only with REDIS_TYPE sentinel")
			return
		}
		u += "?sentinel_password=" + url.QueryEscape(sa)
	}
	r.ev.settings["redis-url"] = setting{value: u, from: "REDIS_URL", vars: []string{"REDIS_URL"}}
}

// upstreamRedisURL turns envoyproxy/ratelimit's REDIS_URL, by REDIS_TYPE,
// into ours:
//
//	single    host:port (or a socket path)  → redis://host:port (unix:///path)
//	sentinel  master,host:port[,host:port]  → redis-sentinel://host:port,.../master
//	cluster   host:port[,host:port]         → redis://host:port,redis://host:port
//
// With no REDIS_TYPE a comma list is Cluster seeds, as in our form.
func upstreamRedisURL(raw, typ, sock, auth string, tls bool) (string, error) {
	scheme := "redis://"
	if tls {
		scheme = "rediss://"
	}
	user := ""
	if auth != "" {
		name, pw, ok := strings.Cut(auth, ":")
		if !ok {
			name, pw = "", auth
		}
		user = url.UserPassword(name, pw).String() + "@"
	}
	parts := strings.Split(raw, ",")
	if typ == "" && len(parts) > 1 {
		typ = "cluster"
	}
	switch typ {
	case "sentinel":
		if len(parts) < 2 || parts[0] == "" {
			return "", fmt.Errorf("%q: want master,host:port[,host:port]", raw)
		}
		addrs, err := hostPorts(parts[1:])
		if err != nil {
			return "", err
		}
		return "redis-sentinel://" + user + strings.Join(addrs, ",") + "/" + url.PathEscape(parts[0]), nil
	case "cluster":
		addrs, err := hostPorts(parts)
		if err != nil {
			return "", err
		}
		for i, a := range addrs {
			addrs[i] = scheme + user + a
		}
		return strings.Join(addrs, ","), nil
	}
	if len(parts) > 1 {
		return "", fmt.Errorf("%q: one address for REDIS_TYPE single", raw)
	}
	if sock == "unix" {
		if !strings.HasPrefix(raw, "/") {
			return "", fmt.Errorf("%q: REDIS_SOCKET_TYPE unix wants a socket path", raw)
		}
		return "unix://" + user + raw, nil
	}
	addr, err := hostPort(raw)
	if err != nil {
		return "", err
	}
	return scheme + user + addr, nil
}

func hostPorts(ss []string) ([]string, error) {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		a, err := hostPort(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no address")
	}
	return out, nil
}
