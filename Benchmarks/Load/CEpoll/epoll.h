// Linux's epoll for the load tool's listeners (Glibc's Swift module leaves it out).
#include <sys/epoll.h>
