package redisstore

import "strconv"

func u(v uint64) string  { return strconv.FormatUint(v, 10) }
func i64(v int64) string { return strconv.FormatInt(v, 10) }
