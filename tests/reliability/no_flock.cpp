// A flock() that fails as it does on a file system without locks (Lustre
// mounted without -o flock answers ENOSYS), for LD_PRELOAD by the tests.
#include <cerrno>

extern "C" int flock(int /*fd*/, int /*operation*/) {
  errno = ENOSYS;
  return -1;
}
