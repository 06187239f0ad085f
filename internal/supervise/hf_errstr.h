/*
 * Go's rendering of each errno (golang.org/x/sys/unix's errorList, the same
 * strings Go's syscall.Errno.Error prints), so a helper reports an error in
 * the same words whichever C library it was linked with (glibc's and
 * musl's strerror differ for ELOOP, ENOMEM, EMFILE and others). Generated
 * from x/sys's zerrors_linux_amd64.go; indexed by the errno names, so the
 * numbering of any architecture applies. x/sys names two of them by other
 * names of the same errno: ENOTSUP (here EOPNOTSUPP) and EFSCORRUPTED
 * (here EUCLEAN, which the C libraries define).
 */
static const char *const hf_go_errstr[] = {
#ifdef EPERM
	[EPERM] = "operation not permitted",
#endif
#ifdef ENOENT
	[ENOENT] = "no such file or directory",
#endif
#ifdef ESRCH
	[ESRCH] = "no such process",
#endif
#ifdef EINTR
	[EINTR] = "interrupted system call",
#endif
#ifdef EIO
	[EIO] = "input/output error",
#endif
#ifdef ENXIO
	[ENXIO] = "no such device or address",
#endif
#ifdef E2BIG
	[E2BIG] = "argument list too long",
#endif
#ifdef ENOEXEC
	[ENOEXEC] = "exec format error",
#endif
#ifdef EBADF
	[EBADF] = "bad file descriptor",
#endif
#ifdef ECHILD
	[ECHILD] = "no child processes",
#endif
#ifdef EAGAIN
	[EAGAIN] = "resource temporarily unavailable",
#endif
#ifdef ENOMEM
	[ENOMEM] = "cannot allocate memory",
#endif
#ifdef EACCES
	[EACCES] = "permission denied",
#endif
#ifdef EFAULT
	[EFAULT] = "bad address",
#endif
#ifdef ENOTBLK
	[ENOTBLK] = "block device required",
#endif
#ifdef EBUSY
	[EBUSY] = "device or resource busy",
#endif
#ifdef EEXIST
	[EEXIST] = "file exists",
#endif
#ifdef EXDEV
	[EXDEV] = "invalid cross-device link",
#endif
#ifdef ENODEV
	[ENODEV] = "no such device",
#endif
#ifdef ENOTDIR
	[ENOTDIR] = "not a directory",
#endif
#ifdef EISDIR
	[EISDIR] = "is a directory",
#endif
#ifdef EINVAL
	[EINVAL] = "invalid argument",
#endif
#ifdef ENFILE
	[ENFILE] = "too many open files in system",
#endif
#ifdef EMFILE
	[EMFILE] = "too many open files",
#endif
#ifdef ENOTTY
	[ENOTTY] = "inappropriate ioctl for device",
#endif
#ifdef ETXTBSY
	[ETXTBSY] = "text file busy",
#endif
#ifdef EFBIG
	[EFBIG] = "file too large",
#endif
#ifdef ENOSPC
	[ENOSPC] = "no space left on device",
#endif
#ifdef ESPIPE
	[ESPIPE] = "illegal seek",
#endif
#ifdef EROFS
	[EROFS] = "read-only file system",
#endif
#ifdef EMLINK
	[EMLINK] = "too many links",
#endif
#ifdef EPIPE
	[EPIPE] = "broken pipe",
#endif
#ifdef EDOM
	[EDOM] = "numerical argument out of domain",
#endif
#ifdef ERANGE
	[ERANGE] = "numerical result out of range",
#endif
#ifdef EDEADLK
	[EDEADLK] = "resource deadlock avoided",
#endif
#ifdef ENAMETOOLONG
	[ENAMETOOLONG] = "file name too long",
#endif
#ifdef ENOLCK
	[ENOLCK] = "no locks available",
#endif
#ifdef ENOSYS
	[ENOSYS] = "function not implemented",
#endif
#ifdef ENOTEMPTY
	[ENOTEMPTY] = "directory not empty",
#endif
#ifdef ELOOP
	[ELOOP] = "too many levels of symbolic links",
#endif
#ifdef ENOMSG
	[ENOMSG] = "no message of desired type",
#endif
#ifdef EIDRM
	[EIDRM] = "identifier removed",
#endif
#ifdef ECHRNG
	[ECHRNG] = "channel number out of range",
#endif
#ifdef EL2NSYNC
	[EL2NSYNC] = "level 2 not synchronized",
#endif
#ifdef EL3HLT
	[EL3HLT] = "level 3 halted",
#endif
#ifdef EL3RST
	[EL3RST] = "level 3 reset",
#endif
#ifdef ELNRNG
	[ELNRNG] = "link number out of range",
#endif
#ifdef EUNATCH
	[EUNATCH] = "protocol driver not attached",
#endif
#ifdef ENOCSI
	[ENOCSI] = "no CSI structure available",
#endif
#ifdef EL2HLT
	[EL2HLT] = "level 2 halted",
#endif
#ifdef EBADE
	[EBADE] = "invalid exchange",
#endif
#ifdef EBADR
	[EBADR] = "invalid request descriptor",
#endif
#ifdef EXFULL
	[EXFULL] = "exchange full",
#endif
#ifdef ENOANO
	[ENOANO] = "no anode",
#endif
#ifdef EBADRQC
	[EBADRQC] = "invalid request code",
#endif
#ifdef EBADSLT
	[EBADSLT] = "invalid slot",
#endif
#ifdef EBFONT
	[EBFONT] = "bad font file format",
#endif
#ifdef ENOSTR
	[ENOSTR] = "device not a stream",
#endif
#ifdef ENODATA
	[ENODATA] = "no data available",
#endif
#ifdef ETIME
	[ETIME] = "timer expired",
#endif
#ifdef ENOSR
	[ENOSR] = "out of streams resources",
#endif
#ifdef ENONET
	[ENONET] = "machine is not on the network",
#endif
#ifdef ENOPKG
	[ENOPKG] = "package not installed",
#endif
#ifdef EREMOTE
	[EREMOTE] = "object is remote",
#endif
#ifdef ENOLINK
	[ENOLINK] = "link has been severed",
#endif
#ifdef EADV
	[EADV] = "advertise error",
#endif
#ifdef ESRMNT
	[ESRMNT] = "srmount error",
#endif
#ifdef ECOMM
	[ECOMM] = "communication error on send",
#endif
#ifdef EPROTO
	[EPROTO] = "protocol error",
#endif
#ifdef EMULTIHOP
	[EMULTIHOP] = "multihop attempted",
#endif
#ifdef EDOTDOT
	[EDOTDOT] = "RFS specific error",
#endif
#ifdef EBADMSG
	[EBADMSG] = "bad message",
#endif
#ifdef EOVERFLOW
	[EOVERFLOW] = "value too large for defined data type",
#endif
#ifdef ENOTUNIQ
	[ENOTUNIQ] = "name not unique on network",
#endif
#ifdef EBADFD
	[EBADFD] = "file descriptor in bad state",
#endif
#ifdef EREMCHG
	[EREMCHG] = "remote address changed",
#endif
#ifdef ELIBACC
	[ELIBACC] = "can not access a needed shared library",
#endif
#ifdef ELIBBAD
	[ELIBBAD] = "accessing a corrupted shared library",
#endif
#ifdef ELIBSCN
	[ELIBSCN] = ".lib section in a.out corrupted",
#endif
#ifdef ELIBMAX
	[ELIBMAX] = "attempting to link in too many shared libraries",
#endif
#ifdef ELIBEXEC
	[ELIBEXEC] = "cannot exec a shared library directly",
#endif
#ifdef EILSEQ
	[EILSEQ] = "invalid or incomplete multibyte or wide character",
#endif
#ifdef ERESTART
	[ERESTART] = "interrupted system call should be restarted",
#endif
#ifdef ESTRPIPE
	[ESTRPIPE] = "streams pipe error",
#endif
#ifdef EUSERS
	[EUSERS] = "too many users",
#endif
#ifdef ENOTSOCK
	[ENOTSOCK] = "socket operation on non-socket",
#endif
#ifdef EDESTADDRREQ
	[EDESTADDRREQ] = "destination address required",
#endif
#ifdef EMSGSIZE
	[EMSGSIZE] = "message too long",
#endif
#ifdef EPROTOTYPE
	[EPROTOTYPE] = "protocol wrong type for socket",
#endif
#ifdef ENOPROTOOPT
	[ENOPROTOOPT] = "protocol not available",
#endif
#ifdef EPROTONOSUPPORT
	[EPROTONOSUPPORT] = "protocol not supported",
#endif
#ifdef ESOCKTNOSUPPORT
	[ESOCKTNOSUPPORT] = "socket type not supported",
#endif
#ifdef EOPNOTSUPP
	[EOPNOTSUPP] = "operation not supported",
#endif
#ifdef EPFNOSUPPORT
	[EPFNOSUPPORT] = "protocol family not supported",
#endif
#ifdef EAFNOSUPPORT
	[EAFNOSUPPORT] = "address family not supported by protocol",
#endif
#ifdef EADDRINUSE
	[EADDRINUSE] = "address already in use",
#endif
#ifdef EADDRNOTAVAIL
	[EADDRNOTAVAIL] = "cannot assign requested address",
#endif
#ifdef ENETDOWN
	[ENETDOWN] = "network is down",
#endif
#ifdef ENETUNREACH
	[ENETUNREACH] = "network is unreachable",
#endif
#ifdef ENETRESET
	[ENETRESET] = "network dropped connection on reset",
#endif
#ifdef ECONNABORTED
	[ECONNABORTED] = "software caused connection abort",
#endif
#ifdef ECONNRESET
	[ECONNRESET] = "connection reset by peer",
#endif
#ifdef ENOBUFS
	[ENOBUFS] = "no buffer space available",
#endif
#ifdef EISCONN
	[EISCONN] = "transport endpoint is already connected",
#endif
#ifdef ENOTCONN
	[ENOTCONN] = "transport endpoint is not connected",
#endif
#ifdef ESHUTDOWN
	[ESHUTDOWN] = "cannot send after transport endpoint shutdown",
#endif
#ifdef ETOOMANYREFS
	[ETOOMANYREFS] = "too many references: cannot splice",
#endif
#ifdef ETIMEDOUT
	[ETIMEDOUT] = "connection timed out",
#endif
#ifdef ECONNREFUSED
	[ECONNREFUSED] = "connection refused",
#endif
#ifdef EHOSTDOWN
	[EHOSTDOWN] = "host is down",
#endif
#ifdef EHOSTUNREACH
	[EHOSTUNREACH] = "no route to host",
#endif
#ifdef EALREADY
	[EALREADY] = "operation already in progress",
#endif
#ifdef EINPROGRESS
	[EINPROGRESS] = "operation now in progress",
#endif
#ifdef ESTALE
	[ESTALE] = "stale file handle",
#endif
#ifdef EUCLEAN
	[EUCLEAN] = "structure needs cleaning",
#endif
#ifdef ENOTNAM
	[ENOTNAM] = "not a XENIX named type file",
#endif
#ifdef ENAVAIL
	[ENAVAIL] = "no XENIX semaphores available",
#endif
#ifdef EISNAM
	[EISNAM] = "is a named type file",
#endif
#ifdef EREMOTEIO
	[EREMOTEIO] = "remote I/O error",
#endif
#ifdef EDQUOT
	[EDQUOT] = "disk quota exceeded",
#endif
#ifdef ENOMEDIUM
	[ENOMEDIUM] = "no medium found",
#endif
#ifdef EMEDIUMTYPE
	[EMEDIUMTYPE] = "wrong medium type",
#endif
#ifdef ECANCELED
	[ECANCELED] = "operation canceled",
#endif
#ifdef ENOKEY
	[ENOKEY] = "required key not available",
#endif
#ifdef EKEYEXPIRED
	[EKEYEXPIRED] = "key has expired",
#endif
#ifdef EKEYREVOKED
	[EKEYREVOKED] = "key has been revoked",
#endif
#ifdef EKEYREJECTED
	[EKEYREJECTED] = "key was rejected by service",
#endif
#ifdef EOWNERDEAD
	[EOWNERDEAD] = "owner died",
#endif
#ifdef ENOTRECOVERABLE
	[ENOTRECOVERABLE] = "state not recoverable",
#endif
#ifdef ERFKILL
	[ERFKILL] = "operation not possible due to RF-kill",
#endif
#ifdef EHWPOISON
	[EHWPOISON] = "memory page has hardware error",
#endif
#ifdef EFTYPE
	[EFTYPE] = "unknown error 134",
#endif
};
