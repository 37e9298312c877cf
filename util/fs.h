/* fs.h — small file-system helpers. */
#ifndef RH_FS_H
#define RH_FS_H

/* Creates `path` and any missing parents (mkdir -p). 0, or -1 with errno. */
int rh_mkdir_p(const char *path);

#endif
