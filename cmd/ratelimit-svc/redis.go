package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis client limits. The client serves the limiter's background sync,
// whose context bounds every round; these bound what a context may not
// (dialing, a stuck socket, a pool wait) and stay short, as a late reply
// is worth less than the next round.
const (
	redisDialTimeout = 2 * time.Second
	redisIOTimeout   = time.Second
	redisPoolTimeout = time.Second
)

// redisOptions is a parsed --redis-url: exactly one of its fields is set.
type redisOptions struct {
	single   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

// newRedisClient builds the client of --redis-url, one of:
//
//	redis://[user:password@]host:port[/db][?option=value...]   one node
//	rediss://...                                                one node, TLS
//	unix://[user:password@]/path/to/socket[?db=N]               one node, Unix socket
//	redis-sentinel://[:password@]host:port[,host:port...]/master[?db=N&sentinel_password=P]
//	host:port,host:port...  or  redis://host:port,redis://host:port...   Cluster seeds
//
// One node takes go-redis's URL options (dial_timeout, read_timeout, ...).
// Sentinel's password is the master's. Cluster seeds share one user,
// password and scheme, and hold no database or options; a lone host:port
// is refused as ambiguous (write redis://host:port for one node).
//
// TLS is on for rediss:// seeds and nodes, and for any form when t is
// Enabled; t's files then give the client certificate and the CA.
//
// The client never retries a command: the limiter's next sync round is
// the retry, and a retried script would charge its hits twice. It obeys
// context deadlines.
func newRedisClient(rawURL string, t redisTLS) (redis.UniversalClient, error) {
	o, err := parseRedisURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := o.applyTLS(t); err != nil {
		return nil, fmt.Errorf("redis TLS: %w", err)
	}
	switch {
	case o.failover != nil:
		return redis.NewFailoverClient(o.failover), nil
	case o.cluster != nil:
		return redis.NewClusterClient(o.cluster), nil
	default:
		return redis.NewClient(o.single), nil
	}
}

func parseRedisURL(rawURL string) (redisOptions, error) {
	s := strings.TrimSpace(rawURL)
	switch {
	case s == "":
		return redisOptions{}, errors.New("redis URL: empty")
	case strings.HasPrefix(s, "redis-sentinel://"):
		o, err := parseSentinelURL(strings.TrimPrefix(s, "redis-sentinel://"))
		if err != nil {
			return redisOptions{}, fmt.Errorf("redis sentinel URL: %w", err)
		}
		return redisOptions{failover: o}, nil
	case strings.Contains(s, ","):
		o, err := parseClusterSeeds(strings.Split(s, ","))
		if err != nil {
			return redisOptions{}, fmt.Errorf("redis cluster seeds: %w", err)
		}
		return redisOptions{cluster: o}, nil
	case strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://") || strings.HasPrefix(s, "unix://"):
		o, err := redis.ParseURL(s)
		if err != nil {
			return redisOptions{}, fmt.Errorf("redis URL: %w", redact(err))
		}
		noRetries(o)
		return redisOptions{single: o}, nil
	case !strings.Contains(s, "://"):
		return redisOptions{}, fmt.Errorf("redis URL %q: a lone host:port is ambiguous: write redis://%s for one node, or list cluster seeds separated by commas", s, s)
	default:
		return redisOptions{}, errors.New("redis URL: scheme must be redis, rediss, unix or redis-sentinel")
	}
}

// applyTLS sets the client's TLS from t's files where TLS is on: the URL
// asked for it (rediss://) or t.Enabled. The server name is each
// address's host.
func (o redisOptions) applyTLS(t redisTLS) error {
	var on bool
	switch {
	case o.single != nil:
		on = o.single.TLSConfig != nil || (t.Enabled && o.single.Network != "unix")
	case o.cluster != nil:
		on = o.cluster.TLSConfig != nil || t.Enabled
	case o.failover != nil:
		on = t.Enabled
	}
	if !on {
		if t.Cert != "" || t.CA != "" {
			return errors.New("client certificate or CA given but TLS is off: use rediss:// or REDIS_TLS=true")
		}
		return nil
	}
	c, err := clientTLSConfig(t)
	if err != nil {
		return err
	}
	switch {
	case o.single != nil:
		if o.single.TLSConfig != nil {
			c.InsecureSkipVerify = c.InsecureSkipVerify || o.single.TLSConfig.InsecureSkipVerify // ?skip_verify=true
		}
		o.single.TLSConfig = c
	case o.cluster != nil:
		o.cluster.TLSConfig = c
	default:
		o.failover.TLSConfig = c
	}
	return nil
}

// redact drops the URL from url.Parse errors, which may hold a password.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// noRetries applies the limits every client gets; timeouts set in the URL
// stay.
func noRetries(o *redis.Options) {
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.ContextTimeoutEnabled = true
	o.DialTimeout = or(o.DialTimeout, redisDialTimeout)
	o.ReadTimeout = or(o.ReadTimeout, redisIOTimeout)
	o.WriteTimeout = or(o.WriteTimeout, redisIOTimeout)
	o.PoolTimeout = or(o.PoolTimeout, redisPoolTimeout)
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// parseSentinelURL parses what follows redis-sentinel://.
func parseSentinelURL(s string) (*redis.FailoverOptions, error) {
	s, rawQuery, _ := strings.Cut(s, "?")
	hosts, master, ok := strings.Cut(s, "/")
	if !ok || master == "" {
		return nil, errors.New("no master name: want redis-sentinel://host:port[,host:port]/master")
	}
	if strings.Contains(master, "/") {
		return nil, fmt.Errorf("master name %q holds '/'", master)
	}
	o := &redis.FailoverOptions{
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: redisDialTimeout, ReadTimeout: redisIOTimeout, WriteTimeout: redisIOTimeout, PoolTimeout: redisPoolTimeout,
	}
	var err error
	if o.MasterName, err = url.PathUnescape(master); err != nil {
		return nil, fmt.Errorf("master name: %w", err)
	}
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		var user string
		if user, o.Password, err = userinfo(hosts[:at]); err != nil {
			return nil, err
		}
		if user != "" {
			return nil, errors.New("a user name is not supported: write redis-sentinel://:password@host:port/master")
		}
		hosts = hosts[at+1:]
	}
	for h := range strings.SplitSeq(hosts, ",") {
		addr, err := hostPort(h)
		if err != nil {
			return nil, err
		}
		o.SentinelAddrs = append(o.SentinelAddrs, addr)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	for k, v := range q {
		last := v[len(v)-1]
		switch k {
		case "db":
			if o.DB, err = strconv.Atoi(last); err != nil || o.DB < 0 {
				return nil, fmt.Errorf("db %q: not a database number", last)
			}
		case "sentinel_password":
			o.SentinelPassword = last
		default:
			return nil, fmt.Errorf("unknown option %q (want db or sentinel_password)", k)
		}
	}
	return o, nil
}

// userinfo splits "user:password" (both percent-encoded).
func userinfo(s string) (user, password string, err error) {
	u, p, _ := strings.Cut(s, ":")
	if user, err = url.PathUnescape(u); err != nil {
		return "", "", errors.New("user name: bad percent-encoding")
	}
	if password, err = url.PathUnescape(p); err != nil {
		return "", "", errors.New("password: bad percent-encoding")
	}
	return user, password, nil
}

// hostPort checks one host:port.
func hostPort(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", s, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("address %q: bad port", s)
	}
	if host == "" {
		return "", fmt.Errorf("address %q: no host", s)
	}
	return net.JoinHostPort(host, port), nil
}

// parseClusterSeeds parses the seeds of a Redis Cluster: each host:port
// or redis[s]://[user:password@]host:port, all with the same scheme and
// credentials.
func parseClusterSeeds(seeds []string) (*redis.ClusterOptions, error) {
	o := &redis.ClusterOptions{
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: redisDialTimeout, ReadTimeout: redisIOTimeout, WriteTimeout: redisIOTimeout, PoolTimeout: redisPoolTimeout,
	}
	var first *redis.Options
	for i, seed := range seeds {
		seed = strings.TrimSpace(seed)
		if seed == "" {
			return nil, fmt.Errorf("seed %d is empty", i+1)
		}
		if !strings.Contains(seed, "://") {
			addr, err := hostPort(seed)
			if err != nil {
				return nil, err
			}
			seed = "redis://" + addr
		}
		if strings.ContainsAny(seed, "?#") {
			return nil, fmt.Errorf("seed %d: options are not supported in cluster seeds", i+1)
		}
		so, err := redis.ParseURL(seed)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", i+1, redact(err))
		}
		if so.DB != 0 {
			return nil, fmt.Errorf("seed %d: a cluster has only database 0", i+1)
		}
		if _, err := hostPort(so.Addr); err != nil {
			return nil, err
		}
		if first == nil {
			first = so
			o.Username, o.Password = so.Username, so.Password
			if so.TLSConfig != nil {
				o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
		} else if so.Username != first.Username || so.Password != first.Password || (so.TLSConfig == nil) != (first.TLSConfig == nil) {
			return nil, fmt.Errorf("seed %d: every seed needs the same scheme, user and password", i+1)
		}
		o.Addrs = append(o.Addrs, so.Addr)
	}
	return o, nil
}

// redisLog sends the Redis client's own messages (a dial that failed, a
// pool that grew) to the service's log at debug level: while Redis is
// down it writes one per failed dial, hundreds a second, and the
// limiter already logs the outage once at warn, with how long it lasted.
// The client's logger is process-wide; the last service wired sets it.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
	}
}

func setRedisLog(log *slog.Logger) { redis.SetLogger(redisLog{log.With("component", "redis")}) }
