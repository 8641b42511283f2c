package dev.headrace.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system, setting permissions through java.nio instead of forking
 * {@code chmod} for every file and directory created (what Hadoop does without its native library).
 * A permission java.nio cannot express (sticky bit) still goes through Hadoop's own path.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {
  @Override
  public void setPermission(Path path, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(path, permission);
      return;
    }
    Files.setPosixFilePermissions(pathToFile(path).toPath(), posix(permission));
  }

  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> result = EnumSet.noneOf(PosixFilePermission.class);
    add(result, permission.getUserAction(),
        PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(result, permission.getGroupAction(),
        PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(result, permission.getOtherAction(),
        PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return result;
  }

  private static void add(Set<PosixFilePermission> result, FsAction action,
      PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      result.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      result.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      result.add(execute);
    }
  }
}
